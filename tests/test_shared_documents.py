"""Items of one call that open with one document (LongBench-v2's questions on one document, samples of one long
prompt) prefill the document once on a GPU, each item computing only its own suffix; forced on the CPU here, where
every item decodes the tokens it decodes when prefilled whole (float32)."""
from __future__ import annotations

import pytest

from snapeval.branching import BranchSet, SharedBranches, document_families, whole_families
from snapeval.cache import FullConfig, SnapKVConfig, SnapStreamConfig, StreamingLLMConfig
from snapeval.engine import SamplingParams
from snapeval.memory_plan import Item, chunk_order, shares_documents
from tests.conftest import TinyTokenizer, random_prompt, tiny_model

CONFIGS = [FullConfig(), SnapStreamConfig.from_budget(16), StreamingLLMConfig.from_budget(24),
           SnapKVConfig.from_budget(16)]


def test_families_are_prompts_opening_with_one_long_document():
    doc, other = random_prompt(40, seed=1), random_prompt(40, seed=2)
    prompts = [doc + [1, 2, 3], other + [5], doc + [1, 2, 4, 9], doc[:30] + [7] * 12, other + [5, 6], doc + [8],
               doc[:10]]
    families, heads = document_families(prompts, minimum=10)
    # doc[:30] + ... shares 30 tokens with the others: the family's head is 30 (>= 10), all four in it
    assert families == [0, 1, 0, 0, 1, 0, None]  # a prompt no longer than the key is alone
    assert heads[0] == heads[2] == heads[3] == heads[5] == 30 and heads[1] == heads[4] == 40 and heads[6] == 0
    assert all(len(p) > h for p, h in zip(prompts, heads))  # every member keeps a suffix
    families, heads = document_families(prompts[:2], minimum=10)
    assert families == [None, None] and heads == [0, 0]  # a family has two members at least
    assert document_families(prompts, minimum=50) == ([None] * 7, [0] * 7)  # nothing that long is shared


def test_a_family_runs_together_and_a_chunk_does_not_split_one():
    items = [Item(50, 4), Item(120, 4), Item(52, 4), Item(90, 4), Item(121, 4)]
    families = [0, 1, 0, None, 1]
    assert chunk_order(items, True, families) == [1, 4, 3, 0, 2]  # family 1 where its longest (4) goes
    assert chunk_order(items, False, families) == [0, 2, 1, 4, 3]
    assert chunk_order(items, True, [None] * 5) == chunk_order(items, True)
    assert whole_families([0, 2, 1, 4, 3], 3, families) == [0, 2]  # would split family 1
    assert whole_families([1, 4, 3, 0, 2], 3, families) == [1, 4, 3]
    assert whole_families([1, 4, 3], 1, families) == [1]  # a family larger than the chunk is split
    assert whole_families([0, 2], 5, families) == [0, 2]
    assert shares_documents("cuda:0") and not shares_documents("cpu")


@pytest.mark.parametrize("batch", [2, 8])
def test_one_document_prefill_decodes_the_tokens_of_whole_prefills(monkeypatch, batch):
    model = tiny_model("llama")
    docs = [random_prompt(n, seed=n) for n in (60, 45)]
    prompts = [docs[0] + random_prompt(6, seed=10), docs[1] + random_prompt(9, seed=11),
               random_prompt(50, seed=12), docs[0] + random_prompt(14, seed=13), docs[1] + random_prompt(3, seed=14)]
    params = [SamplingParams(max_new_tokens=n) for n in (4, 6, 5, 9, 3)]
    reference = BranchSet(model, TinyTokenizer(), CONFIGS, batch=batch)
    expected = reference.generate(prompts, params)
    assert not reference.shares_documents()  # the CPU prefills every item whole
    monkeypatch.setattr("snapeval.branching.shares_documents", lambda device: True)
    monkeypatch.setattr("snapeval.memory_plan.order.MIN_SHARED_DOCUMENT", 32)
    group = BranchSet(model, TinyTokenizer(), CONFIGS, batch=batch)
    assert group.shares_documents()
    out = group.generate(prompts, params)
    for c, config in enumerate(CONFIGS):
        assert [d.token_ids for d in out[c]] == [d.token_ids for d in expected[c]], config.label
        assert [d.index for d in out[c]] == list(range(len(prompts)))
    # each document once, then each member's suffix; the lone item whole
    heads = [shared_prefix_len(prompts[0], prompts[3]), shared_prefix_len(prompts[1], prompts[4])]
    assert group.stats.prefills == 2 + 4 + 1
    assert (group.stats.shared_documents, group.stats.document_members) == (2, 4)
    assert SharedBranches(group).describe()["shared_documents"] == {"documents": 2, "items": 4}
    assert "shared_documents" not in SharedBranches(reference).describe()  # the CPU's provenance as it was
    assert group.stats.prefill_tokens == sum(heads) + sum(len(p) for p in prompts) - 2 * sum(heads)
    assert reference.stats.prefill_tokens == sum(len(p) for p in prompts)
    # a family's members are planned with their document held, and run in one chunk
    parts = [part for part, _ in group.chunk_plans[-1]]
    assert parts == ([[0, 3], [1, 4], [2]] if batch == 2 else [[0, 3, 1, 4, 2]])  # input order on the CPU
    assert group.chunk_plans[-1][0][1].prompt_tokens == 74  # its plan holds the largest item and its document


def test_a_press_set_prefills_every_item_whole(monkeypatch):
    from snapeval.cache import resolve_method

    monkeypatch.setattr("snapeval.branching.shares_documents", lambda device: True)
    model = tiny_model("llama")
    group = BranchSet(model, TinyTokenizer(), [FullConfig(), resolve_method("kvpress:KnormPress", 16)], batch=2)
    assert group.presses and not group.shares_documents()  # its hooks read the whole prompt's hidden states


def shared_prefix_len(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) - 1 and a[n] == b[n]:
        n += 1
    return n


def test_a_preamble_every_prompt_shares_is_not_taken_for_a_document():
    """Prefill the fewest tokens: four prompts share a 20-token preamble, and two pairs of them a 60-token document
    after it; the pairs are the families (saving 2 x 80 tokens, not 3 x 20). Samples of one prompt are one family
    that computes only its last token."""
    preamble = random_prompt(20, seed=5)
    docs = [preamble + random_prompt(60, seed=6), preamble + random_prompt(60, seed=7)]
    prompts = [docs[0] + [1], docs[1] + [2], docs[0] + [3, 4], docs[1] + [5]]
    families, heads = document_families(prompts, minimum=16)
    assert families == [0, 1, 0, 1] and heads == [80] * 4
    same = [docs[0]] * 3 + [preamble + random_prompt(30, seed=8)]
    families, heads = document_families(same, minimum=16)
    assert families == [0, 0, 0, None] and heads == [79, 79, 79, 0]
