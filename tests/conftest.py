"""Shared fixtures: tiny random Llama/Qwen2 models (float64, milliseconds), the real SmolLM2, the shared data."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

# Tests never reach the hub: fail fast instead of lm-eval/datasets retrying for a minute.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

# Under pytest-xdist (the README's test command runs 2 workers, one per core of the 2-core reference machine) each
# worker gets one torch thread, and so does every process a test starts (a documented command, an lm-eval run), so
# the workers do not oversubscribe the cores they share: a `snapeval run` beside a busy core took 56 s with two
# threads and 35 s with one.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"

REPO = Path(__file__).resolve().parents[1]
# the shared data folder: $SNAPEVAL_DATA_DIR (empty counts as unset, as in snapeval.paths), else beside the checkout
DATA_DIR = Path(os.environ.get("SNAPEVAL_DATA_DIR") or REPO.parent / "shared" / "data")


class TinyTokenizer:
    """Enough of a tokenizer for ``snapeval.generate`` on token-id prompts."""

    pad_token_id = 0
    eos_token_id = 1

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(str(i) for i in ids if not (skip_special_tokens and i in (0, 1)))


def tiny_model(family: str = "llama", seed: int = 0, layers: int = 2, heads: int = 4, kv_heads: int = 2):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    common = dict(
        vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv_heads, max_position_embeddings=1024, pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )
    if family == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common))
    else:
        model = Qwen2ForCausalLM(Qwen2Config(**common))
    model = model.to(torch.float64).eval()
    model.generation_config.pad_token_id = 0
    return model


@pytest.fixture(params=["llama", "qwen2"])
def tiny(request):
    return tiny_model(request.param)


@pytest.fixture
def tiny_tokenizer():
    return TinyTokenizer()


@pytest.fixture(scope="session")
def smollm2():
    from snapeval import load_model

    return load_model("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def data_dir():
    if not DATA_DIR.is_dir():
        pytest.skip(f"shared data folder not found at {DATA_DIR} (set SNAPEVAL_DATA_DIR)")
    return DATA_DIR


def skip_if_it_needed_the_shared_data(stderr: str) -> None:
    """Skip a test whose command failed only because the shared data folder is absent (a checkout without
    ``../shared/data``): its one-line error names ``SNAPEVAL_DATA_DIR``. Where the folder exists this never skips."""
    if not DATA_DIR.is_dir() and "SNAPEVAL_DATA_DIR" in stderr:
        pytest.skip(f"shared data folder not found at {DATA_DIR} (set SNAPEVAL_DATA_DIR)")


def random_prompt(length: int, seed: int, vocab: int = 96) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (length,), generator=g).tolist()


LONG_FACT = "The secret city is Lisbon. " + " ".join(f"Note {i}: the weather was mild and the river was calm." for i in range(60))


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A tiny random Llama saved with SmolLM2's real tokenizer (float64 keeps comparisons exact)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from snapeval.models import load_tokenizer

    tokenizer = load_tokenizer("smollm2-135m-instruct")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    path = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(config).to(torch.float64).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def task_dir(tmp_path_factory):
    """Two small local lm-eval tasks: a generate_until one and a multiple-choice one with a long context."""
    root = tmp_path_factory.mktemp("tasks")
    gen = [{"question": f"{LONG_FACT[: 200 + 40 * i]} Question {i}: name the secret city.", "answer": "Lisbon"}
           for i in range(3)]
    mc = [{"context": LONG_FACT, "choices": ["Lisbon", "Paris", "Rome", "Oslo"], "label": 0},
          {"context": LONG_FACT[:600], "choices": ["calm", "wild"], "label": 0}]
    for name, rows in (("gen", gen), ("mc", mc)):
        (root / f"{name}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (root / "tiny_gen.yaml").write_text(f"""task: tiny_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {root / 'gen.jsonl'}
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["\\n\\n"]
  max_gen_toks: 6
  do_sample: false
metric_list:
  - metric: exact_match
""")
    (root / "tiny_mc.yaml").write_text(f"""task: tiny_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {root / 'mc.jsonl'}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{context}}}}\\nThe answer is"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: label
metric_list:
  - metric: acc
""")
    return root




@pytest.fixture(autouse=True)
def _environment_info_once_per_process():
    """lm-eval's ``simple_evaluate`` ends each run with ``add_env_info`` (torch's ``collect_env``: pip and other
    subprocesses, ~1.3 s of a core); the tests that call it directly (stub models over the task families, the
    protocols, stock lm-eval beside snapeval) get it once per worker, as snapeval's own runs do
    (:func:`snapeval.harness.evaluate._environment_info_once_per_process`: later runs copy the first run's fields)."""
    if "lm_eval.evaluator" in sys.modules:  # never imports lm-eval for a test that does not
        from snapeval.harness.evaluate import _environment_info_once_per_process as once

        once()
    yield


SANDBOX_LOCK = Path(os.environ.get("TMPDIR", "/tmp")) / "snapeval-tests-sandbox.lock"


@pytest.fixture(autouse=True)
def _sandbox_lock(request):
    """The tests that look for sandbox processes or run cgroups left anywhere on the machine (``sandbox_alone``) run
    while no other test runs programs (``runs_programs``), whichever pytest-xdist worker it is on: an flock held
    exclusively by the first, shared by the second."""
    import fcntl

    if request.node.get_closest_marker("sandbox_alone"):
        mode = fcntl.LOCK_EX
    elif request.node.get_closest_marker("runs_programs"):
        mode = fcntl.LOCK_SH
    else:
        yield
        return
    with open(SANDBOX_LOCK, "a") as lock:
        fcntl.flock(lock, mode)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# The committed results are data the docs quote and the tests compare against: no test may write them, not even the
# same bytes back (a rewrite races the tests that read them). The controller (or the only process) records every
# file's modification time under results/ (results/runs/ is the users' own, ignored) before the session and
# fails the session, naming the files, if any changed after it.
COMMITTED_RESULTS = REPO / "results"


def _committed_results_stamps() -> dict[str, int]:
    return {str(p.relative_to(REPO)): p.stat().st_mtime_ns for p in COMMITTED_RESULTS.rglob("*")
            if p.is_file() and "runs" not in p.relative_to(COMMITTED_RESULTS).parts[:1]}


def pytest_sessionstart(session):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        session.config.stash[_STAMPS] = _committed_results_stamps()


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("PYTEST_XDIST_WORKER") or _STAMPS not in session.config.stash:
        return
    before, after = session.config.stash[_STAMPS], _committed_results_stamps()
    written = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    if written:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = (f"tests wrote the committed results ({len(written)} files: {', '.join(written[:5])}"
                   f"{', ...' if len(written) > 5 else ''}); a test must write a copy under its tmp_path")
        if reporter is not None:
            reporter.write("\n")
            reporter.write_line(f"ERROR: {message}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_STAMPS = pytest.StashKey[dict]()
