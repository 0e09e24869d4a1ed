"""``snapeval-lm-eval``: lm-eval's own command line with the ``snapeval`` model registered.

lm-eval 0.4.13 discovers models only from its built-in table, so the stock ``lm_eval`` command cannot see a model
defined in another package. This entry point registers it and hands over to lm-eval's CLI unchanged:

    snapeval-lm-eval --model snapeval --model_args pretrained=smollm2-135m-instruct,method=snapstream,budget=1024 \\
        --include_path tasks/ --tasks snapeval_passkey
"""
from __future__ import annotations


def main() -> None:
    import sys

    import snapeval.harness.lm_eval_model  # noqa: F401  (registers "snapeval" and its deprecated alias "snapstream")
    from lm_eval.__main__ import cli_evaluate

    from snapeval.errors import SnapevalError

    try:
        cli_evaluate()
    except SnapevalError as exc:  # bad input: one line, exit 2, as the snapeval command does
        print(f"snapeval-lm-eval: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
