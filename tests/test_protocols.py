"""Each benchmark scored as its official runner scores it: differential tests against the official scoring rules and
stub models with known answers run through lm-eval (no weights).

The golden verdicts below were produced by the official scorers themselves, run outside this repository on exactly
these cases (snapeval never imports or vendors them):

- AIME: QwQ's evaluation (``QwenLM/QwQ`` at 620a5ea, ``eval/eval/eval.py``: ``get_after_think``, then
  ``math_opensource.work``: Qwen2.5-Math's ``parser.extract_answer(gen, "aime24")``, ``strip_string`` on the prediction
  and on the reference, ``grader.math_equal``), with sympy 1.12, latex2sympy2 1.9.1 and word2number 1.1 as its
  requirements pin them.
- LongBench-v2: ``extract_answer`` of ``THUDM/LongBench`` ``pred.py`` (c5ea10b).

The item-by-item golden tables the official code made are checked in ``tests/test_protocols_longbench.py`` and
``tests/test_protocols_aime.py``; LiveCodeBench's differential tests are in ``tests/test_protocols_livecodebench.py``.
"""
from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest

lm_eval = pytest.importorskip("lm_eval")
from lm_eval.tasks import TaskManager  # noqa: E402

from snapeval.tasks.followup import read_two_pass  # noqa: E402
from snapeval.results.schema import from_lm_eval  # noqa: E402
from snapeval.tasks import aime, longbench  # noqa: E402
from snapeval.tasks.metrics import pass_at_k  # noqa: E402
from tests.conftest import DATA_DIR  # noqa: E402
from tests.fixtures.stub_lm import StubLM  # noqa: E402

TASKS = str(Path(__file__).resolve().parents[1] / "tasks")

AIME_CASES = [  # (generation, answer, official verdict)
    ('So the answer is $\\boxed{25}$.', '25', True),
    ('\\boxed{025}', '25', True),
    ('\\boxed{25}', '025', True),
    ('first \\boxed{3}, no wait: \\boxed{25}', '25', True),
    ('\\boxed{24}', '25', False),
    ('<think>\nmaybe \\boxed{7}\n</think>\n\nFinal: \\boxed{25}', '25', True),
    ('<think>\nmaybe \\boxed{25}\n</think>\n\nFinal: \\boxed{7}', '25', False),
    ('<think>maybe \\boxed{25}</think>Final: \\boxed{7}', '25', False),
    ('<think>maybe \\boxed{7}</think>Final: \\boxed{25}', '25', True),
    ('<think>\nso far \\boxed{25} but wait', '25', True),
    ('<think>\nso far it is 25, but let me check 26', '25', False),
    ('Let me think.\n</think>\n\nThe answer is 25.', '25', True),
    ('reasoning\n</think>\n\nno final answer', '25', False),
    ('\\boxed{\\frac{50}{2}}', '25', True),
    ('\\boxed{\\dfrac{50}{2}}', '25', True),
    ('\\boxed{\\frac{1}{2}}', '25', False),
    ('\\boxed{5^{2}}', '25', True),
    ('\\boxed{5^2}', '25', False),
    ('\\boxed{\\sqrt{625}}', '25', True),
    ('\\boxed{3 \\cdot 7 + 4}', '25', True),
    ('\\boxed{25.0}', '25', True),
    ('\\boxed{25.00}', '25', True),
    ('\\boxed{25.001}', '25', True),
    ('\\boxed{25.01}', '25', False),
    ('\\boxed{0.25}', '25', True),
    ('\\boxed{2500}', '25', True),
    ('\\boxed{25\\%}', '25', True),
    ('\\boxed{x = 25}', '25', True),
    ('\\boxed{n=25}', '25', True),
    ('\\boxed{[25]}', '25', True),
    ('\\boxed{(25)}', '25', True),
    ('\\boxed{25 \\text{ minutes}}', '25', True),
    ('\\boxed{\\text{25}}', '25', True),
    ('\\boxed{25^\\circ}', '25', True),
    ('\\boxed 25$ done', '25', True),
    ('\\boxed{1,000}', '1000', True),
    ('The final answer is 25', '25', True),
    ('the answer is 25', '25', True),
    ('The answer is: 25.', '25', True),
    ('we get 12 and then 25 apples', '25', True),
    ('nothing here', '25', False),
    ('', '25', False),
    ('\\boxed{}', '25', False),
    ('\\boxed{25', '25', True),
    ('\\boxed{-25}', '25', False),
    ('\\boxed{204}', '204', True),
    ('\\boxed{2.04}', '204', True),
    ('\\boxed{204}.', '204', True),
    ('\\boxed{\\textbf{(B) } 25}', '25', False),
    ('\\boxed{25} and \\boxed{26}', '26', True),
    ('answer: $25$', '25', True),
    ('\\fbox{25}', '25', True),
    ('\\boxed{0}', '0', True),
    ('\\boxed{000}', '0', True),
    ('\\boxed{12.5 \\times 2}', '25', True),
    ("\\boxed{__import__('os').system('true')}", '25', False),
    ('\\boxed{5**2}', '25', True),
    ('\\boxed{50/2}', '25', True),
    ('\\boxed{3*7+4}', '25', True),
    ('\\boxed{27^2}', '25', True),
    ('\\boxed{2^{3}+17}', '25', True),
    ('\\boxed{5 \\times 5}', '25', True),
    ('\\boxed{\\frac{100}{4}}.', '25', True),
    ('\\boxed{25}\n\nThe answer is 26', '25', True),
    ('The answer is 26. \\boxed{25}', '25', True),
    ('<think>\n\\boxed{25}\n</think>\n\n', '25', False),
    ('Answer: 25 \n</think>\n\n\\boxed{26}', '25', False),
    ('\\boxed{\\left(25\\right)}', '25', True),
    ('\\boxed{25.5}', '25', False),
    ('\\boxed{ 25 }', '25', True),
    ('\\boxed{$25$}', '25', True),
    ('\\boxed{twenty-five}', '25', True),
]
LONGBENCH_CASES = [  # (reply, official extraction)
    ('The correct answer is (B)', 'B'),
    ('The correct answer is B', 'B'),
    ('The correct answer is (B).', 'B'),
    ('**The correct answer is (C)**', 'C'),
    ('The correct answer is **(D)**', 'D'),
    ('The *correct* answer is (A)', 'A'),
    ('the correct answer is (A)', None),
    ('The correct answer is: (A)', None),
    ('The correct answer is (E)', None),
    ('The correct answer is (b)', None),
    ('The correct answer is A) because', 'A'),
    ('The correct answer is Answer', 'A'),
    ('The correct answer is (A) or maybe The correct answer is (B)', 'A'),
    ('The correct answer is B, not The correct answer is (C)', 'C'),
    ('The correct answer is  (A)', None),
    ('The correct answer is\n(A)', None),
    ('Answer: (A)', None),
    ('', None),
    ('(A)', None),
    ('The correct answer is (A and B)', None),
    ('The correct answer is ( A )', None),
    ('I think The correct answer is (D).', 'D'),
    ('The correct answer is (insert answer here)', None),
    ('The correct answer is CD', 'C'),
]


@pytest.mark.parametrize("generation, answer, official", AIME_CASES)
def test_aime_scoring_equals_the_official_grader(generation, answer, official):
    assert aime.score({"ID": "case", "Answer": answer}, [generation])["exact_match"] == float(official)


@pytest.mark.parametrize("reply, official", LONGBENCH_CASES)
def test_longbench_extraction_equals_pred_py(reply, official):
    assert longbench.extract_answer(reply) == official
    doc = {"answer": official or "A", "difficulty": "easy", "length": "short", "domain": "Single-Document QA"}
    assert longbench.score(doc, reply)["acc"] == float(official is not None)


def test_aime_diagnostics_are_apart_from_the_score():
    cut = aime.score({"ID": "x", "Answer": "25"}, ["<think>\nso far \\boxed{25} but wait"], assume_thinking=True)
    assert cut["exact_match"] == 1.0 and cut["truncated_in_thinking"] == 1.0  # the official grader reads it anyway
    none = aime.score({"ID": "x", "Answer": "25"}, ["no number at all"])
    assert none["exact_match"] == 0.0 and none["unparsable"] == 1.0


def test_aime_never_evaluates_the_models_text():
    assert aime.arithmetic_value("__import__('os').system('false')") is None
    assert aime.arithmetic_value("9^{9^{9}}") is None  # a power too large to compute is no answer, not a hang
    assert aime.arithmetic_value("\\frac{408}{2}") == 204.0 and aime.arithmetic_value("5^2") == 7.0  # XOR, as official


def test_consensus_votes_by_value_and_breaks_ties_by_first_answer():
    assert aime.consensus(["25", "7", "025", "", "7"]) == "25"  # 25 and 025 are one vote of two; 7 has two: tie
    assert aime.consensus(["", ""]) == ""
    assert aime.consensus(["\\frac{50}{2}", "7", "25"]) == "\\frac{50}{2}"


# ------------------------------------------------------------------------------------------ stub models, lm-eval

def _need(rel: str) -> None:
    if not (DATA_DIR / rel).is_file():
        pytest.skip(f"real data not available: {DATA_DIR / rel} is absent (set SNAPEVAL_DATA_DIR)")


def _run(task: str, model: StubLM, limit: int, **metadata):
    manager = TaskManager(include_path=TASKS, include_defaults=False, metadata={"data_dir": str(DATA_DIR), **metadata})
    out = lm_eval.simple_evaluate(model=model, tasks=[task], task_manager=manager, limit=limit, log_samples=True,
                                  bootstrap_iters=0)
    return out, from_lm_eval("cell", {}, out)


def test_aime_sampled_scores_every_sample():
    _need("aime24/aime_2024.jsonl")
    right = {}  # problem -> how many of its 8 samples are right: 0..7 over the problems, sample 0 always wrong

    def answer(doc, sample, context, kwargs):
        assert kwargs["do_sample"] and kwargs["temperature"] == 0.6 and kwargs["top_p"] == 0.95
        correct = right.setdefault(doc["ID"], len(right) % 8)
        return "\\boxed{%s}" % (doc["Answer"] if 0 < sample <= correct else "1000")

    out, cell = _run("aime24_snapeval_sampled", StubLM(answer), limit=8)
    result = out["results"]["aime24_snapeval_sampled"]
    counts = [right[doc_id] for doc_id in right]
    assert len(counts) == 8
    assert result["pass@1,samples"] == pytest.approx(sum(c / 8 for c in counts) / 8)
    for k in (2, 4, 8):
        assert result[f"pass@{k},samples"] == pytest.approx(sum(pass_at_k(8, c, k) for c in counts) / 8)
    assert result["cons@8,samples"] == pytest.approx(sum(c > 4 for c in counts) / 8)  # majority of the 8 samples
    assert result["exact_match,samples"] == 0.0  # the first sample is always wrong
    assert all(len(s.generations) == 8 for s in cell.samples)  # every sample is stored
    assert cell.metrics[0].key == "pass@1,samples"  # the headline: averaged pass@1, the task's first metric
    assert len({s.cluster for s in cell.samples}) == 8 and all(s.cluster for s in cell.samples)
    assert not cell.deterministic


def test_aime_sampled_all_but_the_first_right_is_seven_eighths():
    _need("aime24/aime_2024.jsonl")
    out, _ = _run("aime24_snapeval_sampled", StubLM(
        lambda doc, sample, context, kwargs: "\\boxed{%s}" % (doc["Answer"] if sample else "1000")), limit=3)
    assert out["results"]["aime24_snapeval_sampled"]["pass@1,samples"] == pytest.approx(0.875)


def test_aime_greedy_is_exact_match_of_its_one_answer():
    _need("aime24/aime_2024.jsonl")
    out, cell = _run("aime24_snapeval", StubLM(
        lambda doc, sample, context, kwargs: "<think>\nhmm\n</think>\n\n\\boxed{%s}" % (
            doc["Answer"] if int(doc["Answer"]) % 2 else "1000")), limit=10)
    rows = [s for s in cell.samples]
    expected = sum(int(s.target) % 2 for s in rows) / len(rows)
    assert out["results"]["aime24_snapeval"]["exact_match,samples"] == pytest.approx(expected)
    assert cell.deterministic


def test_longbench_zero_shot_scores_pred_py_extraction():
    _need("longbench_v2/longbench_v2.jsonl")
    right = {}

    def answer(doc, sample, context, kwargs):
        assert context == longbench.fill(longbench.TEMPLATE_0SHOT, doc)  # the official prompt, nothing added
        assert kwargs["temperature"] == 0.1 and kwargs["max_gen_toks"] == 128  # as pred.py sends it
        right[doc["_id"]] = doc["difficulty"] == "hard"
        letter = doc["answer"] if right[doc["_id"]] else "ABCD"[("ABCD".index(doc["answer"]) + 1) % 4]
        return f"**The correct answer is ({letter})**"

    out, cell = _run("longbench_v2", StubLM(answer), limit=12)
    assert len(right) == 12 and 0 < sum(right.values()) < 12
    assert out["results"]["longbench_v2"]["acc,none"] == pytest.approx(sum(right.values()) / 12)
    assert out["results"]["longbench_v2"]["acc_hard,none"] == 1.0 and out["results"]["longbench_v2"]["acc_easy,none"] == 0.0
    assert not cell.deterministic  # temperature 0.1, as pred.py


def test_longbench_chain_of_thought_is_two_passes_as_pred_py():
    _need("longbench_v2/longbench_v2.jsonl")
    seen = []

    def answer(doc, sample, context, kwargs):
        if "$COT$" not in longbench.TEMPLATE_0SHOT_COT and context == longbench.fill(longbench.TEMPLATE_0SHOT_COT, doc):
            assert kwargs["max_gen_toks"] == 1024 and kwargs["temperature"] == 0.1
            seen.append("first")
            return f"  The question asks about {doc['_id']}; it must be {doc['answer']}.  "
        reasoning = f"The question asks about {doc['_id']}; it must be {doc['answer']}."  # stripped, as pred.py
        assert context == longbench.fill(longbench.TEMPLATE_0SHOT_COT_ANS, doc, cot=reasoning)
        assert doc["context"].strip()[:200] not in context  # the second pass omits the document
        assert kwargs["max_gen_toks"] == 128 and kwargs["temperature"] == 0.1
        seen.append("second")
        return f"The correct answer is ({doc['answer']})" if doc["length"] == "short" else "I am not sure."

    out, cell = _run("longbench_v2_cot", StubLM(answer), limit=10)
    assert seen == ["first", "second"] * 10
    result = out["results"]["longbench_v2_cot"]
    assert result["acc_short,none"] == 1.0 and result["acc_medium,none"] == 0.0
    assert result["unparsable,none"] == pytest.approx(1 - result["acc,none"]) and 0 < result["acc,none"] < 1
    passes = read_two_pass(cell.samples[0].generations[0])
    assert passes["first_pass"].strip().startswith("The question asks") and passes["second_pass_tokens"] > 0


def test_longbench_questions_on_one_document_are_one_cluster():
    _need("longbench_v2/longbench_v2.jsonl")
    from snapeval.tasks.longbench.hooks import longbench_v2_dataset

    docs = longbench_v2_dataset(data_dir=str(DATA_DIR))["test"]
    by_context = Counter(d["context"] for d in docs)
    clusters = Counter(d["cluster"] for d in docs)
    assert len(clusters) == len(by_context)
    shared = [n for n in clusters.values() if n > 1]
    if len(docs) == 395:  # the local copy: 38 questions share 10 documents, up to 6 on one
        assert (len(shared), sum(shared), max(shared)) == (10, 38, 6)


def test_synthetic_task_scores_a_known_answer():
    from snapeval.models import load_tokenizer  # noqa: F401  (the preset's tokenizer sizes the prompts)

    def answer(doc, sample, context, kwargs):
        return " ".join(doc["answers"]) if doc["index"] % 2 == 0 else "no idea"

    out, cell = _run("snapeval_kv_needle", StubLM(answer), limit=6, pretrained="smollm2-135m-instruct",
                     max_seq_lengths=[256], num_samples=6)
    assert out["results"]["snapeval_kv_needle"]["score,none"] == pytest.approx(0.5)
    assert len({s.cluster for s in cell.samples}) == 6


# --------------------------------------------------------------------- the snapstream model runs the two passes

def tiny_first_prompt(doc: dict) -> str:
    """doc_to_text of the tiny two-pass task below (its followup's first_prompt)."""
    return doc["question"]


def tiny_second_prompt(doc: dict, first_output: str) -> str:
    return f"Question: {doc['short']}\nReasoning: {first_output.strip()}\nSo the city is"


@pytest.fixture(scope="module")
def two_pass_task_dir(tmp_path_factory, task_dir):
    root = tmp_path_factory.mktemp("two_pass")
    (root / "tiny_two_pass.yaml").write_text(f"""task: tiny_two_pass
dataset_path: json
dataset_kwargs:
  data_files:
    test: {task_dir / 'gen.jsonl'}
test_split: test
output_type: generate_until
process_docs: !function hooks.add_short
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
process_results: !function hooks.score
generation_kwargs:
  until: []
  max_gen_toks: 9
  do_sample: false
  followup:
    prompt: tests.test_protocols:tiny_second_prompt
    first_prompt: tests.test_protocols:tiny_first_prompt
    max_gen_toks: 5
    do_sample: false
metric_list:
  - metric: acc
""")
    (root / "hooks.py").write_text('''import json
from snapeval.tasks.followup import read_two_pass

def add_short(dataset):
    return dataset.map(lambda doc: {**doc, "short": doc["question"][-40:]})

def score(doc, results):
    passes = read_two_pass(results[0])
    return {"acc": float("Lisbon" in passes["second_pass"])}
''')
    return root


def _two_pass_sweep(tiny_dir, task_dir, out, per_cell, **extra):
    import io
    import json as _json

    from snapeval.sweep import parse_config, run_sweep

    config = parse_config({
        "name": "two_pass", "models": [{"pretrained": str(tiny_dir)}], "include_path": str(task_dir),
        "tasks": ["tiny_two_pass"], "methods": ["full", "snapstream", "streamingllm", "snapkv"], "budgets": [24],
        "simulate": {"enabled": False}, **extra,
    })
    summary = run_sweep(config.per_cell() if per_cell else config, out, stream=io.StringIO(), report=False,
                        simulate=None)
    assert summary.ok and len(summary.ran) == 4
    return {p.name: _json.loads(p.read_text()) for p in (out / "cells").glob("*.json")}


def test_two_pass_shared_prefill_equals_each_configuration_alone(tiny_dir, two_pass_task_dir, tmp_path):
    shared = _two_pass_sweep(tiny_dir, two_pass_task_dir, tmp_path / "shared", per_cell=False)
    alone = _two_pass_sweep(tiny_dir, two_pass_task_dir, tmp_path / "alone", per_cell=True)
    assert shared.keys() == alone.keys()
    for name, cell in shared.items():
        assert [s["generations"] for s in cell["samples"]] == [s["generations"] for s in alone[name]["samples"]]
        for sample in cell["samples"]:
            passes = read_two_pass(sample["generations"][0])
            assert passes["first_pass_tokens"] >= 1 and passes["second_pass_tokens"] >= 1
    provenance = next(iter(shared.values()))["harness_config"]["shared_prefill"]
    # per item: one prefill of the first prompt, one of the second prompts' common prefix, one suffix per method
    assert provenance["prefills"] == 3 * (1 + 1 + 4)
    # both passes ran under a memory plan: the second holds each item's shared prefix while the suffixes run
    first, second = provenance["memory_plans"]
    assert first["fits"] and second["fits"] and len(provenance["measured_peaks"]) == 2
    assert (first["max_new_tokens"], second["max_new_tokens"]) == (9, 5)  # the task's two passes
    sharded = _two_pass_sweep(tiny_dir, two_pass_task_dir, tmp_path / "sharded", per_cell=False, shards=2)
    for name, cell in shared.items():  # item shards give the same texts and scores
        assert [s["generations"] for s in sharded[name]["samples"]] == [s["generations"] for s in cell["samples"]]
        assert sharded[name]["metrics"] == cell["metrics"]


def test_sampling_seeds_follow_the_request_not_its_position():
    from types import SimpleNamespace

    from snapeval.harness.lm_eval_model import request_seeds

    a = SimpleNamespace(metadata=("aime", 3, 8), idx=0)
    b = SimpleNamespace(metadata=("aime", 4, 8), idx=0)
    seeds = request_seeds([a, a, a, b], base_seed=0)
    assert len(set(seeds[:3])) == 3  # a problem's repeats draw differently
    assert request_seeds([b, a, a, a], 0) == [seeds[3], *seeds[:3]]  # order and batching do not matter
    assert request_seeds([a], 1) != request_seeds([a], 0)  # the run's seed does
    renumbered = SimpleNamespace(metadata=("aime", 0, 8), idx=0)  # an item shard's first document is the task's 4th
    assert request_seeds([renumbered], 0, documents={"aime": [4, 7]}) == [seeds[3]]
    assert request_seeds([SimpleNamespace(metadata=None, idx=0)] * 2, 5) == [5, 6]  # no identity: the position
