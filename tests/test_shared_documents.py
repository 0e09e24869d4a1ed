"""Items of one call that open with one document (LongBench-v2's answer and chain-of-thought prompts of a question)
prefill the document once on a GPU, each item computing only its own suffix; forced on the CPU here, where every item
decodes the tokens it decodes when prefilled whole (float32)."""
from __future__ import annotations

import os
from pathlib import Path

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
    monkeypatch.setattr("snapeval.branching.MIN_SHARED_DOCUMENT", 32)
    group = BranchSet(model, TinyTokenizer(), CONFIGS, batch=batch)
    assert group.shares_documents()
    out = group.generate(prompts, params)
    for c, config in enumerate(CONFIGS):
        assert [d.token_ids for d in out[c]] == [d.token_ids for d in expected[c]], config.label
        assert [d.index for d in out[c]] == list(range(len(prompts)))
    # each document once, then each member's suffix; the lone item whole
    heads = [shared_prefix_len(prompts[0], prompts[3]), shared_prefix_len(prompts[1], prompts[4])]
    assert group.stats.prefills == 2 + 4 + 1
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


def test_shared_branches_compute_an_expected_companion_with_the_call_that_comes_first(monkeypatch):
    """A sweep unit of two tasks that share documents previews the second task's requests (:meth:`SharedBranches.
    collecting`); the first task's call then computes both in one :meth:`BranchSet.generate`, and the second task's
    call reads its answers: the same tokens as two separate calls."""
    from snapeval.branching import Previewed

    monkeypatch.setattr("snapeval.branching.shares_documents", lambda device: True)
    monkeypatch.setattr("snapeval.branching.MIN_SHARED_DOCUMENT", 32)
    model = tiny_model("llama")
    docs = [random_prompt(n, seed=n) for n in (60, 45, 52)]
    answer = [d + random_prompt(4, seed=20 + i) for i, d in enumerate(docs)]
    reason = [d + random_prompt(7, seed=30 + i) for i, d in enumerate(docs)]
    short, long = [SamplingParams(max_new_tokens=3)] * 3, [SamplingParams(max_new_tokens=8)] * 3
    separate = BranchSet(model, TinyTokenizer(), CONFIGS, batch=4)
    expected_answer, expected_reason = separate.generate(answer, short), separate.generate(reason, long)

    shared = SharedBranches(BranchSet(model, TinyTokenizer(), CONFIGS, batch=4))
    assert shared.shares_documents()
    calls = []
    real = BranchSet.generate
    monkeypatch.setattr(BranchSet, "generate", lambda self, p, s: calls.append(len(p)) or real(self, p, s))
    with shared.collecting():
        with pytest.raises(Previewed):
            shared.generate(CONFIGS[1], reason, long)
    assert calls == []  # a preview computes nothing
    for c, config in enumerate(CONFIGS):
        assert [d.token_ids for d in shared.generate(config, answer, short)] == \
            [d.token_ids for d in expected_answer[c]], config.label
    assert calls == [6]  # one call: the answers and the expected reasoning, each document prefilled once
    for c, config in enumerate(CONFIGS):
        assert [d.token_ids for d in shared.generate(config, reason, long)] == \
            [d.token_ids for d in expected_reason[c]], config.label
    assert calls == [6]  # the companion's call read its answers
    assert shared.branches.stats.prefills == 3 + 6


def test_an_expected_first_pass_serves_a_two_pass_call(monkeypatch):
    from snapeval.branching import Previewed

    monkeypatch.setattr("snapeval.branching.shares_documents", lambda device: True)
    monkeypatch.setattr("snapeval.branching.MIN_SHARED_DOCUMENT", 32)
    model = tiny_model("llama")
    docs = [random_prompt(n, seed=n) for n in (50, 41)]
    answer = [d + random_prompt(4, seed=20 + i) for i, d in enumerate(docs)]
    reason = [d + random_prompt(7, seed=30 + i) for i, d in enumerate(docs)]
    short, long = [SamplingParams(max_new_tokens=3)] * 2, [SamplingParams(max_new_tokens=6)] * 2

    def second(i, first_done):
        return random_prompt(8, seed=40 + i) + first_done.token_ids, SamplingParams(max_new_tokens=2)

    plain = SharedBranches(BranchSet(model, TinyTokenizer(), CONFIGS, batch=4))
    expected = [plain.generate_two_pass(config, reason, long, second, "k") for config in CONFIGS]
    shared = SharedBranches(BranchSet(model, TinyTokenizer(), CONFIGS, batch=4))
    with shared.collecting():
        with pytest.raises(Previewed):
            shared.generate_two_pass(CONFIGS[0], reason, long, second, "k")
    shared.generate(CONFIGS[0], answer, short)
    prefills = shared.branches.stats.prefills
    assert prefills == 2 + 4  # both tasks' first passes, each document once
    for c, config in enumerate(CONFIGS):
        got = shared.generate_two_pass(config, reason, long, second, "k")
        assert [(a.token_ids, b.token_ids) for a, b in got] == \
            [(a.token_ids, b.token_ids) for a, b in expected[c]], config.label


# --- the sweep: the groups of tasks that share documents run as one unit, the later tasks previewed ----------------
def _cells(tmp_path, tasks):
    from snapeval.sweep import expand_grid, parse_config
    from snapeval.tasks.families import task_family

    for rel in task_family("longbench_v2").data_files:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}\n")
    return expand_grid(parse_config({
        "name": "docs", "models": ["smollm2-135m-instruct"], "data_dir": str(tmp_path),
        "tasks": [{"name": t, "limit": 4} for t in tasks],
        "methods": ["full", {"method": "snapstream", "budgets": [128, 512]}]}))


def test_the_groups_of_tasks_that_share_documents_run_as_one_unit(tmp_path):
    from snapeval.sweep.planning import work_units
    from snapeval.sweep.shards import Shard

    cells = _cells(tmp_path, ["longbench_v2", "snapeval_passkey", "longbench_v2_cot"])
    units = work_units(cells)
    assert [u.tasks for u in units] == [["longbench_v2", "longbench_v2_cot"], ["snapeval_passkey"]]
    assert len(units[0].cells) == 6 and units[0].shared
    assert "longbench_v2 + longbench_v2_cot | 3 configurations (one prefill)" in units[0].label
    assert cells[0].document_group == cells[-1].document_group and cells[3].document_group is None
    # per item shard; a shard whose first task is done runs the second alone
    done = lambda cell, shard: cell.task.name == "longbench_v2" and shard.index == 0  # noqa: E731
    sharded = work_units(cells, lambda members: 2, done)
    assert [(u.tasks, u.shard) for u in sharded] == [  # a merged unit goes where its first part was
        (["longbench_v2", "longbench_v2_cot"], Shard(1, 2)), (["snapeval_passkey"], Shard(0, 2)),
        (["snapeval_passkey"], Shard(1, 2)), (["longbench_v2_cot"], Shard(0, 2))]
    # other configurations pending: two units
    partial = [c for c in cells if c.task.name != "longbench_v2_cot" or c.config.method == "full"]
    assert [u.tasks for u in work_units(partial)] == [["longbench_v2"], ["snapeval_passkey"], ["longbench_v2_cot"]]
    # a model that does not share its prefill: every cell alone, nothing merged
    assert all(c.document_group is None for c in _cells(tmp_path, ["snapeval_passkey"]))


class _Shared:
    """What a unit's preview reads of the shared branches (a stub; the real ones are tested above)."""

    def __init__(self, shares: bool):
        self.shares, self.on, self.expected = shares, False, []

    def shares_documents(self):
        return self.shares

    def collecting(self):
        import contextlib

        @contextlib.contextmanager
        def scope():
            self.on = True
            try:
                yield self
            finally:
                self.on = False
        return scope()


class _LM:
    def __init__(self, shared):
        self.shared = shared


@pytest.mark.parametrize("shares", [True, False])
def test_a_unit_previews_its_later_tasks_then_runs_every_cell(tmp_path, shares):
    from fixtures.sweep_fakes import fake_evaluate
    from snapeval.branching import Previewed
    from snapeval.sweep.execution import CellRunner
    from snapeval.sweep.planning import work_units

    (unit,) = work_units(_cells(tmp_path, ["longbench_v2", "longbench_v2_cot"]))
    shared = _Shared(shares)
    calls = []

    def evaluate(lm=None, **kwargs):
        calls.append((kwargs["tasks"][0], shared.on))
        if shared.on:
            shared.expected.append(kwargs["tasks"][0])
            raise Previewed("recorded")
        return fake_evaluate(**kwargs)

    runner = CellRunner(evaluate, lambda cells: [_LM(shared) for _ in cells])
    results = list(runner(unit))
    assert [cell.cell_id for cell, _, _ in results] == [cell.cell_id for cell in unit.cells]
    assert all(result is not None and error is None for _, result, error in results)
    ran = [("longbench_v2", False)] * 3 + [("longbench_v2_cot", False)] * 3
    assert calls == ([("longbench_v2_cot", True)] + ran if shares else ran)
    assert shared.expected == (["longbench_v2_cot"] if shares else [])


def test_a_failed_preview_only_loses_the_sharing(tmp_path, capsys):
    from fixtures.sweep_fakes import fake_evaluate
    from snapeval.sweep.execution import CellRunner
    from snapeval.sweep.planning import work_units

    (unit,) = work_units(_cells(tmp_path, ["longbench_v2", "longbench_v2_cot"]))
    shared = _Shared(True)

    def evaluate(lm=None, **kwargs):
        if shared.on:
            raise RuntimeError("boom")
        return fake_evaluate(**kwargs)

    assert CellRunner(evaluate, lambda cells: [_LM(shared) for _ in cells]).preview(
        unit, [_LM(shared) for _ in unit.cells]) == []
    assert "previewing longbench_v2_cot failed" in capsys.readouterr().err
    assert all(r is not None for _, r, _ in CellRunner(evaluate, lambda cells: [_LM(shared) for _ in cells])(unit))


DATA = Path(os.environ.get("SNAPEVAL_DATA_DIR") or Path(__file__).resolve().parents[2] / "shared" / "data")


@pytest.mark.skipif(not (DATA / "longbench_v2").is_dir(), reason="needs ../shared/data (LongBench-v2)")
def test_a_unit_of_both_longbench_tasks_through_lm_eval_prefills_each_document_once(tmp_path, monkeypatch):
    """The real harness on a tiny random Llama: the chain of thought previewed, then the answer task's first call
    computes both tasks' first passes in one call (each document once); every cell's replies are those of a unit
    that prefills every prompt whole."""
    from snapeval.sweep import expand_grid, parse_config
    from snapeval.sweep.execution import CellRunner, harness_evaluate, harness_group_models
    from snapeval.sweep.planning import work_units

    model_dir = tmp_path / "tiny"
    tiny_checkpoint(model_dir)
    cells = expand_grid(parse_config({
        "name": "docs", "data_dir": str(DATA), "models": [{"pretrained": str(model_dir), "dtype": "float32"}],
        "tasks": [{"name": t, "limit": 3, "generation": {"max_gen_toks": 6},
                   "metadata": {"max_input_tokens": 200}} for t in ("longbench_v2", "longbench_v2_cot")],
        "methods": ["full", {"method": "snapstream", "budgets": [64]}]}))
    (unit,) = work_units(cells)

    from snapeval.branching import BranchSet

    real = BranchSet.generate

    def run(shares: bool):
        monkeypatch.setattr("snapeval.branching.shares_documents", lambda device: shares)
        built, calls = [], []

        def spy(self, prompts, sampling):
            before = (self.stats.prefills, self.stats.prefill_tokens)
            out = real(self, prompts, sampling)
            calls.append((prompts, self.stats.prefills - before[0], self.stats.prefill_tokens - before[1]))
            return out

        monkeypatch.setattr(BranchSet, "generate", spy)
        runner = CellRunner(harness_evaluate, lambda cells: built.extend(harness_group_models(cells)) or built)
        results = {cell.cell_id: result for cell, result, error in runner(unit) if not error or pytest.fail(error)}
        return results, calls

    monkeypatch.setattr("snapeval.branching.MIN_SHARED_DOCUMENT", 32)
    whole, whole_calls = run(False)
    shared, shared_calls = run(True)
    for cell in unit.cells:
        got = [s.generations for s in shared[cell.cell_id].samples]
        assert got == [s.generations for s in whole[cell.cell_id].samples], cell.label
        assert len(got) == 3 and all(g[0] for g in got)
    # separately: the answers, then the reasoning, each prompt whole; shared: one call of both, each family's
    # document once and each prompt's suffix
    assert [len(p) for p, _, _ in whole_calls] == [3, 3]
    assert [n for _, n, _ in whole_calls] == [3, 3]
    ((prompts, prefills, tokens),) = shared_calls
    assert prompts == whole_calls[0][0] + whole_calls[1][0]
    families, heads = document_families(prompts, minimum=32)
    firsts = {f: heads[i] for i, f in enumerate(families) if f is not None}
    assert firsts and prefills == len(firsts) + 6
    assert tokens == sum(map(len, prompts)) - sum(heads) + sum(firsts.values())
    assert tokens < whole_calls[0][2] + whole_calls[1][2]


def tiny_checkpoint(path: Path) -> None:
    """A random 2-layer Llama with a byte-level tokenizer (every text encodes), saved like a hub checkpoint."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {t: i for i, t in enumerate(["<unk>", "<s>", "</s>", "<pad>", *sorted(alphabet)])}
    tok = Tokenizer(models.BPE(vocab, [], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                     pad_token="<pad>", model_max_length=4096)
    hf_tok.save_pretrained(path)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         bos_token_id=1, eos_token_id=2, pad_token_id=3)
    LlamaForCausalLM(config).save_pretrained(path)
