"""Host work per decode step at R1 generation lengths: the stop-string check and the sampled token choice.

Two measurements, each a ratio inside this one process (the machine's load is recorded beside them):

- **Stop strings.** One request's :meth:`~snapeval.decoding.requests.Request.check_stop` fed a real generation one
  token at a time up to 32,768 tokens (LongBench-v2 documents in DeepSeek-R1-Distill-Qwen-7B's own tokenizer, from
  its GGUF header; no stop string occurs, as in a long R1 answer before LiveCodeBench's ``###``): the mean host time
  per step over the 256 steps before 1k, 8k and 32k generated tokens, against the full decode of the whole
  generation every step (what the check did before, timed at the same points). Target: flat within 1.2x from 1k to
  32k.
- **Sampled step.** :func:`~snapeval.decoding.sampling.choose` of one row on real next-token distributions
  (SmolLM2-135M-Instruct's logits along a LongBench-v2 document: a random-weight model's are nearly flat and would
  never let top-p confine a draw) greedy, sampled with top-p (the distills' 0.6 / 0.95: the partial top-k path
  wherever the nucleus fits the candidates), with top-k 40 (QwQ's AIME setting) and at temperature alone (the
  whole-row sort); the batched :func:`~snapeval.decoding.sampling.sample_rows` a captured step runs (the whole-row
  sort) for 8 and 64 rows at the R1 vocabulary beside their argmax; an eager engine's choice for 8 slots there,
  drawing only for the slots that sample against every row; and
  :func:`~snapeval.decoding.sampling.sampling_bytes_per_row` there.

    python -m benchmarks.host_step            # writes results/bench/host_step.json (about a minute)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from benchmarks.common import data_dir, machine, write_json

POINTS = (1024, 8192, 32768)
WINDOW = 256


def generation_ids(tokenizer, tokens: int) -> list[int]:
    """``tokens`` ids of real text (LongBench-v2 documents, "###" removed), in the tokenizer's own ids."""
    ids: list[int] = []
    with open(data_dir() / "longbench_v2" / "longbench_v2.jsonl") as f:
        for line in f:
            text = json.loads(line)["context"].replace("#", "")
            ids += tokenizer(text, add_special_tokens=False).input_ids
            if len(ids) >= tokens:
                return ids[:tokens]
    raise SystemExit(f"benchmark: the LongBench-v2 data holds fewer than {tokens} tokens")


def stop_check_times(tokenizer, ids: list[int]) -> dict:
    """Mean seconds per step of the incremental check and of a full decode, over the window before each point."""
    from snapeval.decoding.requests import Request, SamplingParams

    request = Request(index=0, prompt=[1], params=SamplingParams(max_new_tokens=len(ids) + 1, stop=("###",)))
    per_step = []
    for token in ids:
        t0 = time.perf_counter()
        assert not request.check_stop(token, frozenset(), tokenizer)
        per_step.append(time.perf_counter() - t0)
    out = {}
    for point in POINTS:
        window = per_step[point - WINDOW:point]
        full = []
        for n in range(point - 32, point):  # the check before: the whole generation decoded at every step
            t0 = time.perf_counter()
            text = tokenizer.decode(ids[:n], skip_special_tokens=True)
            text.find("###", max(0, len(text) - 64))  # the search itself started near the end
            full.append(time.perf_counter() - t0)
        out[str(point)] = {"incremental_us": 1e6 * statistics.fmean(window),
                           "incremental_median_us": 1e6 * statistics.median(window),
                           "full_decode_us": 1e6 * statistics.fmean(full)}
    first = out[str(POINTS[0])]["incremental_us"]
    for point in POINTS:
        out[str(point)]["incremental_vs_1k"] = out[str(point)]["incremental_us"] / first
    return out


def sampled_step_times(positions: int) -> dict:
    """The token choice of one row, greedy and sampled, on real next-token distributions: SmolLM2-135M-Instruct's
    logits (the real model; vocabulary 49,152) at ``positions`` positions of a LongBench-v2 document; and the
    captured step's batched draw (the whole-row sort) at the R1 vocabulary, 152,064, beside its argmax."""
    import torch

    from snapeval.decoding import SamplingParams
    from snapeval.decoding.sampling import (CANDIDATES, SampleStream, choose, filter_candidates, sample_rows,
                                            sampling_bytes_per_row)
    from snapeval.models import load_model

    model, tokenizer = load_model("smollm2-135m-instruct")
    ids = generation_ids(tokenizer, positions + 64)
    with torch.no_grad():
        rows = model(torch.tensor([ids])).logits[0, -positions:].float()
    settings = {"greedy": SamplingParams(),
                "top_p_0.95_t0.6": SamplingParams(do_sample=True, temperature=0.6, top_p=0.95),
                "top_k_40_t0.6": SamplingParams(do_sample=True, temperature=0.6, top_k=40, top_p=0.95),
                "temperature_0.6_only": SamplingParams(do_sample=True, temperature=0.6)}
    out: dict = {"model": "smollm2-135m-instruct", "vocab": rows.shape[-1], "positions": positions,
                 "candidates": CANDIDATES}
    for name, params in settings.items():
        times = []
        for i, logits in enumerate(rows):
            t0 = time.perf_counter()
            choose(logits, params, SampleStream(i))
            times.append(time.perf_counter() - t0)
        out[name + "_us"] = 1e6 * statistics.median(times)
        if params.do_sample:
            *_, fits = filter_candidates(rows, torch.full((positions,), params.temperature),
                                         torch.full((positions,), params.top_k), torch.full((positions,), params.top_p),
                                         candidates=CANDIDATES)
            out[name + "_fits_candidates"] = float(fits.double().mean())
    for name in list(settings)[1:]:
        out[name + "_vs_greedy"] = out[name + "_us"] / out["greedy_us"]
    vocab = 152064
    g = torch.Generator().manual_seed(0)
    for count in (8, 64):
        batch = torch.randn(count, vocab, generator=g) * 4
        args = (torch.ones(count, dtype=torch.bool), torch.full((count,), 0.6), torch.zeros(count, dtype=torch.long),
                torch.full((count,), 0.95), torch.arange(count), torch.zeros(count, dtype=torch.long))
        sampled, greedy = [], []
        for _ in range(5):
            t0 = time.perf_counter()
            sample_rows(batch, *args)
            sampled.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            batch.argmax(-1)
            greedy.append(time.perf_counter() - t0)
        out[f"captured_rows_{count}_vocab_{vocab}"] = {
            "sampled_us": 1e6 * statistics.median(sampled), "greedy_us": 1e6 * statistics.median(greedy),
            "sampled_vs_greedy": statistics.median(sampled) / statistics.median(greedy)}
    out["eager_engine_rows_8_vocab_152064"] = eager_engine_step(vocab)
    out["sampling_bytes_per_row_vocab_152064"] = sampling_bytes_per_row(vocab)
    return out


def eager_engine_step(vocab: int, rows: int = 8) -> dict:
    """An eager engine's token choice for ``rows`` slots at ``vocab`` (random logits: the sampled rows sort their whole
    row), :meth:`~snapeval.decoding.sampling.SlotSampler.choose_eager` (draws only for the slots that sample) against
    :meth:`~snapeval.decoding.sampling.SlotSampler.choose` (every row drawn: what an eager step ran before, and what
    a captured step runs), with 1 and with every slot sampling; the same tokens either way."""
    import torch

    from snapeval.decoding import SamplingParams
    from snapeval.decoding.sampling import SampleStream, SlotSampler

    logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(1)) * 4
    out = {}
    for sampling in (1, rows):
        times = {"every_row": [], "sampling_slots_only": []}
        for _ in range(5):
            for name in times:
                sampler = SlotSampler(rows, "cpu")
                for slot in range(rows):
                    params = SamplingParams(do_sample=slot < sampling, temperature=0.6, top_p=0.95, seed=slot)
                    sampler.assign(slot, params, SampleStream(slot) if params.do_sample else None)
                choice = sampler.choose if name == "every_row" else sampler.choose_eager
                t0 = time.perf_counter()
                tokens = choice(logits)
                times[name].append(time.perf_counter() - t0)
                if name == "every_row":
                    reference = tokens
                else:
                    assert torch.equal(tokens[:sampling], reference[:sampling])
        every, only = (statistics.median(times[k]) for k in ("every_row", "sampling_slots_only"))
        out[f"{sampling}_of_{rows}_sampling"] = {"every_row_us": 1e6 * every, "sampling_slots_only_us": 1e6 * only,
                                                 "every_row_vs_sampling_slots_only": every / only}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.host_step", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="host_step.json", help="file name under results/bench/")
    parser.add_argument("--positions", type=int, default=200, help="real next-token distributions timed")
    args = parser.parse_args(argv)
    import torch

    from snapeval.models.folders import folder_tokenizer

    torch.set_num_threads(1)  # one row's host work, on one core (two threads beside a busy core wait on each op)

    load = os.getloadavg()
    tokenizer = folder_tokenizer("deepseek-r1-distill-qwen-7b")
    ids = generation_ids(tokenizer, POINTS[-1])
    stops = stop_check_times(tokenizer, ids)
    sampled = sampled_step_times(args.positions)
    payload = {"benchmark": "host_step", "machine": machine(), "load_average_before": load,
               "load_average_after": os.getloadavg(), "tokenizer": "deepseek-r1-distill-qwen-7b (GGUF header)",
               "stop_check_per_step": stops, "sampled_step": sampled,
               "flat_within_1_2x": max(v["incremental_vs_1k"] for v in stops.values()) <= 1.2}
    path = write_json(args.out, payload)
    for point, row in stops.items():
        print(f"stop check at {point:>5} tokens: {row['incremental_us']:7.1f} us/step incremental "
              f"({row['incremental_vs_1k']:.2f}x the 1k figure), {row['full_decode_us']:9.1f} us/step full decode")
    print(f"one row's choice on {sampled['model']}'s real logits (vocab {sampled['vocab']}): greedy "
          f"{sampled['greedy_us']:.0f} us, top-p {sampled['top_p_0.95_t0.6_us']:.0f} us (candidates fit "
          f"{sampled['top_p_0.95_t0.6_fits_candidates']:.0%}), top-k {sampled['top_k_40_t0.6_us']:.0f} us, "
          f"temperature only {sampled['temperature_0.6_only_us']:.0f} us")
    for key, row in sampled.items():
        if key.startswith("captured_rows_"):
            print(f"{key}: sampled {row['sampled_us']:.0f} us, greedy {row['greedy_us']:.0f} us "
                  f"({row['sampled_vs_greedy']:.0f}x)")
    for key, row in sampled["eager_engine_rows_8_vocab_152064"].items():
        print(f"eager engine, 8 rows, {key}: every row drawn {row['every_row_us']:.0f} us, the sampling slots only "
              f"{row['sampling_slots_only_us']:.0f} us ({row['every_row_vs_sampling_slots_only']:.1f}x)")
    print(f"{sampled['sampling_bytes_per_row_vocab_152064'] / 2**20:.1f} MiB per sampled row at vocab 152,064")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
