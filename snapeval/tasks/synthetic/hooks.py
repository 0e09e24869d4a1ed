"""The lm-eval hooks of the synthetic retrieval tasks (group ``snapeval_synthetic``, the YAML beside this file)."""
from __future__ import annotations

from typing import Any

from snapeval.errors import SnapevalError
from snapeval.tasks import synthetic
from snapeval.tasks.hooks import as_dataset, cluster_of, get_tokenizer, int_value, reasoning, tokenizer_name

DEFAULT_SYNTHETIC_LENGTHS = (1024, 2048, 4096)
DEFAULT_SYNTHETIC_SAMPLES = 20


def _synthetic(task: str, md: dict) -> dict[str, Any]:
    name = tokenizer_name(md)
    if not name:
        raise SnapevalError(
            f"snapeval_{task} needs the evaluated model's tokenizer to size its prompts; pass it with "
            "--model_args pretrained=<model> or --metadata '{\"tokenizer\": \"<name or path>\"}'")
    lengths = md.get("max_seq_lengths", DEFAULT_SYNTHETIC_LENGTHS)
    if isinstance(lengths, (int, str)):
        lengths = str(lengths).replace(";", ",").split(",")
    try:
        lengths = [int(x) for x in lengths if str(x).strip()]
        if not lengths or min(lengths) < 1:
            raise ValueError
    except (TypeError, ValueError):
        raise SnapevalError(f"metadata.max_seq_lengths={md.get('max_seq_lengths')!r} is invalid; allowed: positive "
                            "integers (a list, or comma-separated)") from None
    samples = synthetic.generate(task, get_tokenizer(name), lengths,
                                 int_value(md, "num_samples", DEFAULT_SYNTHETIC_SAMPLES), seed=int_value(md, "seed", 0))
    thinks = reasoning(md)
    docs = [s.to_doc() for s in samples]
    # every generated haystack carries one question: each doc is its own cluster (the haystack's identity)
    return as_dataset([{**d, "reasoning": thinks, "tokenizer_name": name,
                         "cluster": cluster_of(task, d["length"], d["seed"], d["index"])} for d in docs])


def passkey_dataset(**md: Any) -> dict[str, Any]:
    return _synthetic("passkey", md)


def kv_needle_dataset(**md: Any) -> dict[str, Any]:
    return _synthetic("kv_needle", md)


def kv_needle_multi_dataset(**md: Any) -> dict[str, Any]:
    return _synthetic("kv_needle_multi", md)


def variable_tracking_dataset(**md: Any) -> dict[str, Any]:
    return _synthetic("variable_tracking", md)


def synthetic_process_results(doc: dict, results: list[str]) -> dict[str, float | None]:
    return synthetic.score(doc, results[0], assume_thinking=doc["reasoning"])
