"""Answer extraction and scoring of every task: correct, wrong, unparsable, with and without thinking sections."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from snapeval.errors import SnapevalError
from snapeval.tasks import aime, livecodebench, longbench, synthetic
from snapeval.tasks.metrics import mean_present, pass_at_k
from snapeval.tasks.reasoning import split_thinking

DATA = Path(os.environ.get("SNAPEVAL_DATA_DIR") or Path(__file__).resolve().parents[1].parent / "shared" / "data")


def test_split_thinking():
    assert split_thinking("<think>\nhmm 12\n</think>\n\nThe answer is 7") == ("hmm 12", "The answer is 7", False)
    assert split_thinking("hmm</think>ans") == ("hmm", "ans", False)  # template opened <think>
    assert split_thinking("<think>still thinking about 12") == ("still thinking about 12", "", True)
    assert split_thinking("plain answer") == ("", "plain answer", False)
    assert split_thinking("cut off 12", assume_thinking=True) == ("cut off 12", "", True)


LB_DOC = {"_id": "x", "domain": "Multi-Document QA", "sub_domain": "s", "difficulty": "hard", "length": "medium",
          "question": " Which? ", "choice_A": "a", "choice_B": "b", "choice_C": "c", "choice_D": "d",
          "answer": "C", "context": " The document. "}


@pytest.mark.parametrize("response, acc, unparsable, cut", [
    ("The correct answer is (C)", 1.0, 0.0, 0.0),
    ("**The correct answer is (C)**", 1.0, 0.0, 0.0),
    ("The correct answer is C.", 1.0, 0.0, 0.0),
    ("The correct answer is (A)", 0.0, 0.0, 0.0),
    ("I think it is C", 0.0, 1.0, 0.0),
    # pred.py reads the raw reply, thinking included: the first match counts (strip_thinking=True reads after it)
    ("<think>The correct answer is (A)? no...</think>The correct answer is (C)", 0.0, 0.0, 0.0),
    ("<think>The correct answer is (C) probably, let me check", 1.0, 0.0, 1.0),
])
def test_longbench_scoring(response, acc, unparsable, cut):
    m = longbench.score(LB_DOC, response)
    assert (m["acc"], m["unparsable"], m["truncated_in_thinking"]) == (acc, unparsable, cut)
    assert m["acc_hard"] == acc and m["acc_medium"] == acc and m["acc_multi_document_qa"] == acc
    assert m["acc_easy"] is None and m["acc_short"] is None and m["acc_single_document_qa"] is None
    assert mean_present([m["acc_easy"], 1.0, None, 0.0]) == 0.5


def test_longbench_prompts_follow_the_official_templates():
    p = longbench.build_prompt(LB_DOC)
    assert p.startswith("Please read the following text and answer the question below.\n\n<text>\nThe document.\n</text>")
    assert "question: Which?\nChoices:\n(A) a\n(B) b\n(C) c\n(D) d\n\n" in p
    assert p.endswith('"The correct answer is (insert answer here)".')
    cot = longbench.build_prompt(LB_DOC, cot=True)
    assert cot.endswith("Let\u2019s think step by step:") and "The document." in cot
    second = longbench.build_cot_answer_prompt(LB_DOC, " reasoning ")
    assert "The document." not in second and "Let\u2019s think step by step: reasoning\n\n" in second


class WordTokenizer:
    """Whitespace tokenizer with a shared vocabulary (decode joins with spaces)."""

    def __init__(self):
        self.vocab: dict[str, int] = {}
        self.inv: list[str] = []

    def encode(self, text, add_special_tokens=False):
        ids = []
        for word in text.split():
            if word not in self.vocab:
                self.vocab[word] = len(self.inv)
                self.inv.append(word)
            ids.append(self.vocab[word])
        return ids

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(self.inv[i] for i in ids)


def test_longbench_middle_truncation_keeps_head_and_tail():
    tok = WordTokenizer()
    prompt = " ".join(f"w{i}" for i in range(100))
    text, n, cut = longbench.truncate_middle(prompt, tok, 10)
    assert (n, cut) == (100, True)
    assert text.split() == [f"w{i}" for i in range(5)] + [f"w{i}" for i in range(95, 100)]
    assert longbench.truncate_middle(prompt, tok, 100) == (prompt, 100, False)  # exactly L: not cut, as pred.py
    odd, _, _ = longbench.truncate_middle(prompt, tok, 11)  # pred.py's ids[-L//2:]: the tail gets the odd token
    assert odd.split() == [f"w{i}" for i in range(5)] + [f"w{i}" for i in range(94, 100)]
    with pytest.raises(SnapevalError, match="max_input_tokens=0"):
        longbench.truncate_middle(prompt, tok, 0)


AIME_DOC = {"ID": "x", "Problem": "Find it.", "Solution": "", "Answer": "25"}


@pytest.mark.parametrize("response, em, unparsable, cut", [
    ("So the answer is $\\boxed{25}$.", 1.0, 0.0, 0.0),
    ("\\boxed{025}", 1.0, 0.0, 0.0),
    ("first \\boxed{3}, no wait: \\boxed{25}", 1.0, 0.0, 0.0),
    ("\\boxed{24}", 0.0, 0.0, 0.0),
    ("\\boxed{\\frac{1}{2}}", 0.0, 0.0, 0.0),
    ("the answer is 25", 1.0, 0.0, 0.0),  # QwQ's grader reads "the answer is" when nothing is boxed
    ("<think>\nmaybe \\boxed{25}\n</think>\n\nFinal: \\boxed{7}", 0.0, 0.0, 0.0),
    ("<think>so far \\boxed{25} but", 1.0, 0.0, 1.0),  # cut off while thinking: read anyway, and counted as cut
    ("no number at all", 0.0, 1.0, 0.0),
])
def test_aime_scoring(response, em, unparsable, cut):
    m = aime.score(AIME_DOC, [response])
    assert (m["exact_match"], m["unparsable"], m["truncated_in_thinking"]) == (em, unparsable, cut)


def test_aime_sampled_metrics_and_prompt():
    m = aime.score(AIME_DOC, ["\\boxed{25}", "\\boxed{1}", "none", "\\boxed{ 25 }"])
    assert m["exact_match"] == 1.0 and m["pass@1"] == 0.5 and m["unparsable"] == 0.25
    assert m["pass@2"] == pytest.approx(pass_at_k(4, 2, 2)) == pytest.approx(5 / 6) and m["pass@4"] == 1.0
    assert m["cons@4"] == 1.0 and set(m) == {"exact_match", "pass@1", "pass@2", "pass@4", "cons@4", "unparsable",
                                            "truncated_in_thinking"}
    assert set(aime.score(AIME_DOC, ["\\boxed{25}"])) == {"exact_match", "pass@1", "unparsable", "truncated_in_thinking"}
    assert aime.build_prompt(AIME_DOC) == "Find it.\nPlease reason step by step, and put your final answer within \\boxed{}."


def test_pass_at_k():
    assert pass_at_k(10, 0, 1) == 0.0 and pass_at_k(10, 10, 5) == 1.0
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    with pytest.raises(SnapevalError, match="n=3, c=4"):
        pass_at_k(3, 4, 1)


def test_livecodebench_code_extraction():
    """The official ``extract_code``: the lines between the last two lines holding a fence, thinking included."""
    assert livecodebench.extract_code("```python\nprint(1)\n```\ntext\n```python\nprint(2)\n```") == "print(2)"
    assert livecodebench.extract_code("<think>```python\nprint(1)\n```</think>no code") == "print(1)"
    assert livecodebench.extract_code("<think>```python\nx\n```") == "x"  # cut off while thinking: graded there too
    assert livecodebench.extract_code("```\nprint(3)\n```") == "print(3)"
    assert livecodebench.extract_code("one fence ```python\nprint(4)") is None
    assert livecodebench.extract_code("no code") is None


def test_livecodebench_prompts_match_the_official_prompt_verbatim():
    qwq = DATA / "livecodebench" / "livecodebench_v5.jsonl"
    if not qwq.is_file():
        pytest.skip(f"real data not available: {qwq} is absent")
    official = {r["question_id"]: r["prompt"] for r in map(json.loads, qwq.open())}
    rows = [r for r in livecodebench.load(DATA).rows if r["question_id"] in official]
    assert len(rows) == 279
    kinds = {bool(r["starter_code"]) for r in rows}
    assert kinds == {True, False}
    mismatched = [r["question_id"] for r in rows if livecodebench.build_prompt(r) != official[r["question_id"]]]
    assert mismatched == []


def test_livecodebench_private_tests_decoding():
    import base64, pickle, zlib

    tests = [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
    packed = base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()
    doc = {"public_test_cases": "[]", "private_test_cases": packed, "metadata": "{}"}
    t = livecodebench.tests_of(doc)
    assert t.private_used and t.cases[0].output == "2\n"


def test_synthetic_scoring():
    doc = {"answers": ["ABCDE", "FGHIJ"], "length": 1024}
    m = synthetic.score(doc, "they are: abcde and FGHIJ")
    assert m["score"] == 1.0 and m["score_1024"] == 1.0 and m["score_2048"] is None
    assert synthetic.score(doc, "ABCDE only")["score"] == 0.5
    assert synthetic.score(doc, "<think>ABCDE FGHIJ</think>none")["score"] == 0.0
    cut = synthetic.score(doc, "<think>ABCDE FGHIJ")
    assert cut["score"] == 0.0 and cut["truncated_in_thinking"] == 1.0
