"""The sampler (snapeval/decoding/sampling.py): an inverse-transform draw at a counter-based uniform equals sampling
from the filtered softmax (checked against the textbook distribution), keeps exactly the tokens top-k / top-p keep (checked
against Hugging Face's warpers), and a row's draw depends on its own seed and counter only."""
import math

import pytest
import torch

from snapeval.decoding import SamplingParams
from snapeval.decoding.sampling import SampleStream, SlotSampler, choose, filtered_logits, sample_rows, uniform_noise
from snapeval.run_args import DecodeChoices


def test_the_noise_is_uniform_and_reproducible():
    seeds, drawn = torch.tensor([0, 1, 2**40, -5]), torch.tensor([0, 7, 3, 2**33])
    u = uniform_noise(seeds, drawn, 50_000)  # 50,000 consecutive indices per row; the sampler uses the first
    assert torch.equal(u, uniform_noise(seeds, drawn, 50_000))
    assert (u > 0).all() and (u < 1).all()
    flat = u.flatten()
    assert abs(float(flat.mean()) - 0.5) < 0.003 and abs(float(flat.var()) - 1 / 12) < 0.002
    # a Kolmogorov-Smirnov distance far below its 0.1% critical value (1.95 / sqrt(n))
    ordered = flat.sort().values
    n = len(ordered)
    ks = float((ordered - torch.arange(1, n + 1, dtype=torch.float64) / n).abs().max())
    assert ks < 1.95 / math.sqrt(n)
    assert not torch.equal(u[0], u[1])  # other seeds, other counters: other noise
    # what the sampler draws: the first uniform of consecutive counters of one seed, and of consecutive seeds
    for across in (uniform_noise(torch.full((100_000,), 11), torch.arange(100_000))[:, 0],
                   uniform_noise(torch.arange(100_000), torch.zeros(100_000, dtype=torch.long))[:, 0]):
        ordered = across.sort().values
        n = len(ordered)
        assert float((ordered - torch.arange(1, n + 1, dtype=torch.float64) / n).abs().max()) < 1.95 / math.sqrt(n)


@pytest.mark.parametrize("params", [
    SamplingParams(do_sample=True, temperature=0.7),
    SamplingParams(do_sample=True, temperature=1.3, top_k=4),
    SamplingParams(do_sample=True, temperature=1.0, top_p=0.8),
    SamplingParams(do_sample=True, temperature=0.6, top_p=0.95, top_k=5),
])
def test_draws_follow_the_filtered_softmax(params):
    """Pearson's chi-square of 20,000 draws (counters 0..19,999 of one seed) against softmax(filtered logits): below
    the 0.1% critical value; tokens outside the filter are never drawn."""
    logits = torch.tensor([2.0, 1.5, 1.2, 0.3, 0.0, -0.5, -1.0, -3.0])
    expected = filtered_logits(logits, params).softmax(-1)
    draws = 20_000
    rows = logits.expand(draws, -1)
    tokens = sample_rows(rows, torch.ones(draws, dtype=torch.bool), torch.full((draws,), params.temperature),
                         torch.full((draws,), params.top_k), torch.full((draws,), params.top_p),
                         torch.full((draws,), 11), torch.arange(draws))
    counts = torch.bincount(tokens, minlength=len(logits)).double()
    assert (counts[expected == 0] == 0).all()
    kept = expected > 0
    chi2 = float(((counts[kept] - draws * expected[kept]) ** 2 / (draws * expected[kept])).sum())
    critical = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52, 6: 22.46, 7: 24.32}[int(kept.sum()) - 1]
    assert chi2 < critical, (chi2, counts.tolist(), expected.tolist())


def test_the_filter_keeps_what_hugging_faces_warpers_keep():
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    generator = torch.Generator().manual_seed(0)
    for _ in range(200):
        logits = torch.randn(1, 300, generator=generator) * 3
        k = int(torch.randint(0, 40, (), generator=generator))
        p = float(torch.rand((), generator=generator)) * 0.9 + 0.05
        params = SamplingParams(do_sample=True, temperature=0.8, top_k=k, top_p=p)
        ours = filtered_logits(logits[0], params)
        theirs = logits / 0.8
        if k:
            theirs = TopKLogitsWarper(k)(None, theirs)
        theirs = TopPLogitsWarper(p)(None, theirs)[0]
        assert torch.equal(torch.isfinite(ours), torch.isfinite(theirs))
        assert torch.allclose(ours[torch.isfinite(ours)], theirs[torch.isfinite(theirs)])


def test_a_rows_draw_depends_on_its_seed_and_counter_only():
    """The same row alone or among others, at any row of the batch, draws the same token; choose() of one request
    is that row, and its stream advances by one draw."""
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(6, 1000, generator=generator)
    sampler = SlotSampler(6, "cpu")
    params = [SamplingParams(do_sample=True, temperature=0.9, top_p=0.9, seed=s) for s in range(5)] + [SamplingParams()]
    streams = [SampleStream(p.seed, drawn=3) if p.do_sample else None for p in params]
    for slot, (p, stream) in enumerate(zip(params, streams)):
        sampler.assign(slot, p, stream)
    batch = sampler.choose(logits)
    assert sampler.drawn.tolist() == [4] * 5 + [1]  # every counter advances (a greedy row's is unused)
    assert int(batch[5]) == int(logits[5].argmax())  # a greedy row
    for row in range(5):
        alone = SampleStream(row, drawn=3)
        assert choose(logits[row], params[row], alone) == int(batch[row]) and alone.drawn == 4
        moved = sample_rows(logits[[row]].flip(0).repeat(3, 1), *[t[[row]].repeat(3) for t in
                                                                   (sampler.do_sample, sampler.temperature,
                                                                    sampler.top_k, sampler.top_p, sampler.seeds)],
                            torch.full((3,), 3))
        assert moved.tolist() == [int(batch[row])] * 3


def test_a_captured_sampled_step_draws_what_the_eager_engine_draws(tiny_tokenizer, monkeypatch):
    """Issue 44 item 1: sampling runs inside the recorded step (the stand-in recorder of tests/test_engine.py), and
    its tokens are the eager engine's; the sampled and the greedy steps are recorded once each."""
    from snapeval.engine import Engine
    from snapeval.engine import engine as engine_module
    from tests.conftest import random_prompt, tiny_model
    from tests.test_engine import ReplayOnCpu

    monkeypatch.setattr(engine_module, "CapturedDecodeStep", ReplayOnCpu)
    ReplayOnCpu.recorded = []
    model = tiny_model("llama")
    prompts = [random_prompt(n, seed=n) for n in (30, 12, 55, 41)]
    sampled = [SamplingParams(max_new_tokens=12, do_sample=True, temperature=1.2, top_p=0.9, top_k=30, seed=s)
               for s in range(4)]
    captured = Engine(model, tiny_tokenizer, 20, num_slots=3, decoding=DecodeChoices(capture=True))
    drawn = captured.generate(prompts, sampled)
    greedy = captured.generate(prompts, SamplingParams(max_new_tokens=6))
    again = captured.generate(prompts, sampled)
    eager = Engine(model, tiny_tokenizer, 20, num_slots=2)
    assert [c.token_ids for c in drawn] == [c.token_ids for c in eager.generate(prompts, sampled)]
    assert [c.token_ids for c in greedy] == [c.token_ids for c in eager.generate(prompts, SamplingParams(max_new_tokens=6))]
    assert [c.token_ids for c in again] == [c.token_ids for c in drawn]  # reproducible across calls
    assert [name for name, _ in ReplayOnCpu.recorded] == ["sampled_step", "greedy_step"]


def test_a_draw_from_the_candidates_is_the_draw_from_the_whole_sorted_row():
    """Differential: where top-k / top-p keep few tokens, :func:`choose` reads them from a partial top-k of the
    vocabulary; it draws exactly what the whole row's sort draws (ties included: bf16-rounded logits, many equal
    values), and a draw whose kept set does not fit the candidates falls back to the sort."""
    from snapeval.decoding import sampling

    g = torch.Generator().manual_seed(0)
    vocab = 5000
    settings = [(0.1, 0, 0.95), (0.6, 0, 0.95), (1.0, 40, 1.0), (0.6, 40, 0.95), (1.0, 0, 0.999), (2.0, 0, 0.99),
                (1.0, 0, 1.0), (0.2, 3000, 0.95)]
    fell_back = fit = 0
    for case in range(160):
        temperature, top_k, top_p = settings[case % len(settings)]
        logits = torch.randn(vocab, generator=g) * (1 + case % 5)
        if case % 3 == 0:
            logits = logits.bfloat16().float()  # coarse values: ties at every boundary
        params = SamplingParams(do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p)
        row = [torch.tensor([x]) for x in (True, temperature, top_k, top_p)]
        *_, fits = sampling.filter_candidates(logits[None], *row[1:], candidates=sampling.CANDIDATES)
        fit += int(fits[0])
        fell_back += int(not fits[0])
        for drawn in range(5):
            whole = sample_rows(logits[None], *row, torch.tensor([case]), torch.tensor([drawn]))
            assert choose(logits, params, SampleStream(case, drawn)) == int(whole[0])
    assert fit > 60 and fell_back > 20  # both paths taken


def test_the_sampled_steps_bytes_per_row_bound_every_tensor_it_holds():
    """Every tensor a sampled step allocates, tracked op by op (a dispatch mode; live bytes rise at each output and
    fall when it is freed): its peak per row is at most :func:`sampling_bytes_per_row`, and not far below it."""
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode

    from snapeval.decoding.sampling import sampling_bytes_per_row

    class Peak(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.live = self.peak = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in (out if isinstance(out, (tuple, list)) else [out]):
                if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes():
                    size = t.untyped_storage().nbytes()
                    self.live += size
                    self.peak = max(self.peak, self.live)
                    weakref.finalize(t.untyped_storage(), self._free, size)
            return out

        def _free(self, size):
            self.live -= size

    rows, vocab = 4, 50_000
    logits = torch.randn(rows, vocab)
    settings = (torch.ones(rows, dtype=torch.bool), torch.full((rows,), 0.6), torch.zeros(rows, dtype=torch.long),
                torch.full((rows,), 0.95), torch.arange(rows), torch.zeros(rows, dtype=torch.long))
    with Peak() as peak:
        sample_rows(logits, *settings)
    per_row = peak.peak / rows
    assert per_row <= sampling_bytes_per_row(vocab) <= 1.6 * per_row, (per_row, sampling_bytes_per_row(vocab))


def test_an_eager_step_draws_each_sampling_slot_what_every_row_drawn_draws():
    """Differential: :meth:`SlotSampler.choose_eager` (an eager engine's step: draws only for the slots whose request
    samples, from the candidates where they fit) gives every sampling slot the token :meth:`SlotSampler.choose` (every
    row, the whole row sorted: what a captured step runs) gives it, with mixed settings in one batch (rows that fit the
    candidates, rows that fall back, greedy rows); a parked slot and a greedy one get the argmax, every counter
    advances."""
    from snapeval.decoding import sampling

    g = torch.Generator().manual_seed(3)
    settings = [(0.1, 0, 0.95), (1.0, 0, 1.0), (0.6, 40, 0.95), (2.0, 0, 0.999), (1.0, 0, 0.9)]
    fell_back = fit = 0
    for case in range(40):
        logits = torch.randn(7, 3000, generator=g) * (1 + case % 4)
        if case % 2:
            logits = logits.bfloat16().float()  # ties at the boundaries
        every, eager = SlotSampler(7, "cpu"), SlotSampler(7, "cpu")
        params = [SamplingParams(do_sample=True, temperature=t, top_k=k, top_p=p, seed=case * 10 + i)
                  for i, (t, k, p) in enumerate(settings)] + [SamplingParams(), SamplingParams(do_sample=True, seed=9)]
        for slot, p in enumerate(params):
            for sampler in (every, eager):
                sampler.assign(slot, p, SampleStream(p.seed, drawn=case) if p.do_sample else None)
        eager.park(6)  # idle: its output is ignored
        fits = sampling.filter_candidates(logits[:5], every.temperature[:5], every.top_k[:5], every.top_p[:5],
                                          candidates=sampling.CANDIDATES)[2]
        fit, fell_back = fit + int(fits.sum()), fell_back + int((~fits).sum())
        reference, tokens = every.choose(logits), eager.choose_eager(logits)
        assert tokens[:5].tolist() == reference[:5].tolist()
        assert tokens[5:].tolist() == logits[5:].argmax(-1).tolist()
        assert torch.equal(eager.drawn, every.drawn)
    assert fit > 40 and fell_back > 40  # both paths taken


def test_an_eager_engine_samples_what_a_step_over_every_row_samples(tiny_tokenizer, monkeypatch):
    """An eager engine (slots left idle, a greedy request beside sampled ones) decodes the same tokens as the same
    engine stepping with :func:`~snapeval.engine.engine.sampled_step` (every row drawn, what a captured or compiled
    step runs)."""
    from snapeval.engine import Engine
    from snapeval.engine import engine as engine_module
    from tests.conftest import random_prompt, tiny_model

    model = tiny_model("llama")
    prompts = [random_prompt(n, seed=n) for n in (30, 12, 55, 41, 23)]
    sampling = [SamplingParams(max_new_tokens=9 + s, do_sample=True, temperature=0.8, top_p=0.9, seed=s)
                for s in range(4)] + [SamplingParams(max_new_tokens=7)]
    eager = [c.token_ids for c in Engine(model, tiny_tokenizer, 20, num_slots=4).generate(prompts, sampling)]
    monkeypatch.setitem(engine_module.EAGER_STEPS, True, engine_module.sampled_step)
    every_row = [c.token_ids for c in Engine(model, tiny_tokenizer, 20, num_slots=4).generate(prompts, sampling)]
    assert eager == every_row and len({tuple(t) for t in eager}) == 5
