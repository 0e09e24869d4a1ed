"""The YAML tasks load in lm-eval offline, build their requests, and run end to end with lm-eval's hf model."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

lm_eval = pytest.importorskip("lm_eval")
from lm_eval.tasks import TaskManager  # noqa: E402

from snapeval.errors import SnapevalError  # noqa: E402
from snapeval.tasks import synthetic  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TASKS = str(REPO / "tasks")
from tests.conftest import DATA_DIR as DATA  # noqa: E402  (the shared data folder, as conftest finds it)
SYNTHETIC = ["snapeval_passkey", "snapeval_kv_needle", "snapeval_kv_needle_multi", "snapeval_variable_tracking"]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A random 2-layer Llama and a word-level tokenizer, built offline and saved like a hub checkpoint."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = set()
    for task in synthetic.TASKS:
        class _Split:
            def encode(self, text, add_special_tokens=False):
                return text.split()
        for s in synthetic.generate(task, _Split(), [200], 2):
            words.update(s.prompt.split())
    vocab = {w: i for i, w in enumerate(["<unk>", "<s>", "</s>", "<pad>", *sorted(words)])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                     pad_token="<pad>", model_max_length=2048)
    path = tmp_path_factory.mktemp("tiny-llama")
    hf_tok.save_pretrained(path)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         bos_token_id=1, eos_token_id=2, pad_token_id=3)
    LlamaForCausalLM(config).save_pretrained(path)
    return str(path)


def _manager(**metadata):
    return TaskManager(include_path=TASKS, include_defaults=False, metadata=metadata)


def test_all_tasks_and_the_group_are_registered():
    names = set(_manager().all_tasks)
    assert {"longbench_v2", "longbench_v2_cot", "aime24_snapeval", "aime24_snapeval_sampled", "livecodebench",
            "snapeval_synthetic", *SYNTHETIC} <= names


def test_synthetic_tasks_build_requests(tiny_model):
    loaded = _manager(pretrained=tiny_model, max_seq_lengths=[120, 200], num_samples=2)
    tasks = loaded.load(SYNTHETIC)["tasks"]
    for name, task in tasks.items():
        task.build_all_requests(limit=4, rank=0, world_size=1)
        docs = list(task.test_docs())
        assert len(docs) == 4 and [d["length"] for d in docs] == [120, 120, 200, 200]
        prompt = task.instances[0].args[0]
        assert prompt == docs[0]["prompt"] and task.instances[0].args[1]["max_gen_toks"] <= 96


def test_synthetic_tasks_say_when_the_tokenizer_is_missing():
    with pytest.raises(SnapevalError, match="needs the evaluated model's tokenizer"):
        _manager(max_seq_lengths=[120]).load(["snapeval_passkey"])["tasks"]["snapeval_passkey"].test_docs()


def _need_data(rel):
    if not (DATA / rel).is_file():
        pytest.skip(f"real data not available: {DATA / rel} is absent (set SNAPEVAL_DATA_DIR)")


def test_real_data_tasks_build_requests(tiny_model):
    _need_data("livecodebench/code_generation_lite.jsonl")
    _need_data("aime24/aime_2024.jsonl")
    mgr = _manager(data_dir=str(DATA), release_version="release_v1")
    tasks = mgr.load(["aime24_snapeval", "livecodebench"])["tasks"]
    for task in tasks.values():
        task.build_all_requests(limit=2, rank=0, world_size=1)
        assert len(task.instances) == 2
    aime_prompt = tasks["aime24_snapeval"].instances[0].args[0]
    assert aime_prompt.endswith("Please reason step by step, and put your final answer within \\boxed{}.")
    assert tasks["livecodebench"].instances[0].args[0].startswith("You will be given a question")
    doc = next(iter(tasks["livecodebench"].test_docs()))
    assert len(doc["data_sha256"]) == 64 and doc["data_rows_used"] == 400


def test_longbench_task_truncates_in_the_middle(tiny_model):
    _need_data("longbench_v2/longbench_v2.jsonl")
    task = _manager(data_dir=str(DATA), pretrained=tiny_model, max_length=600).load(["longbench_v2"])["tasks"]
    task = task["longbench_v2"]
    task.build_all_requests(limit=1, rank=0, world_size=1)
    prompt = task.instances[0].args[0]
    from transformers import AutoTokenizer

    from snapeval.tasks import longbench

    tok = AutoTokenizer.from_pretrained(tiny_model)
    doc = next(iter(task.test_docs()))
    full = longbench.build_prompt(doc)
    from snapeval.tasks.longbench.hooks import template_tokens

    # an unlisted model: its context less the generation budget, the chat template's tokens and the margin
    limit = 600 - 128 - template_tokens(tok) - longbench.REENCODE_MARGIN
    expected, n_full, cut = longbench.truncate_middle(full, tok, limit)
    assert cut and n_full > 600 and prompt == expected
    assert len(tok.encode(prompt)) <= limit + 2  # re-encoding a decoded cut may merge or split a token


def test_end_to_end_simple_evaluate_with_hf(tiny_model, tmp_path):
    mgr = _manager(pretrained=tiny_model, max_seq_lengths=[160], num_samples=2)
    out = lm_eval.simple_evaluate(model="hf", model_args=f"pretrained={tiny_model},dtype=float32",
                                  tasks=["snapeval_passkey", "snapeval_kv_needle"], task_manager=mgr, limit=2,
                                  device="cpu", batch_size=1, log_samples=True)
    for name in ("snapeval_passkey", "snapeval_kv_needle"):
        res = out["results"][name]
        assert 0.0 <= res["score,none"] <= 1.0
        assert res["score_512,none"] is None or math.isnan(res["score_512,none"])
        samples = out["samples"][name]
        assert len(samples) == 2
        for s in samples:  # the logged score is the scorer's verdict on the logged output
            expected = synthetic.score(s["doc"], s["resps"][0][0])["score"]
            assert s["score"] == expected
    json.dumps(out["results"], default=str)
