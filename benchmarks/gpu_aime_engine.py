"""The engine at AIME's shape with an R1 distill: slots from the memory plan, decode step against its byte floor.

Model: DeepSeek-R1-Distill-Qwen-7B's architecture with random weights in bfloat16 (``benchmarks.gpu.build_model``).
Requests: ``--samples`` (default 64, QwQ's and DeepSeek-R1's sample count) of one prompt of AIME's mean prompt
length in that model's tokenizer (``paper_lengths.json``; random token ids: the step's cost does not depend on
them). Configurations: SnapStream at ``configs/paper_r1_distill.yaml``'s budgets (4k-32k; sink 16, recent half the
rest). Per budget, the engine (:class:`snapeval.engine.Engine`, captured on CUDA as the sweep runs it) gets the slots
the memory plan gives a generation of ``--plan-new`` tokens (32,768: AIME's ``max_gen_toks``;
:func:`snapeval.memory_plan.engine_slots`), and decodes ``--new`` tokens per request, greedy and then sampled
(temperature 0.6, top-p 0.95; the sampling runs on the step's logits, outside the captured graph). A SnapStream row
is fixed-size (a ring buffer once the budget is full), so a step costs the same at token 256 as at token 32,768:
the measured step is the long generation's. Each figure: slots, occupancy, mean step time, the step's byte floor
at those slots ((weights + slots x one row's bytes) / the measured copy bandwidth), ``x_floor``, tokens/s.

``--smoke`` runs the same code on the CPU at tiny shapes (the test suite runs it; its numbers mean nothing). Writes
``results/bench/gpu_aime_engine.json`` after every budget.

    python -m benchmarks.gpu_aime_engine                    # on a GPU machine (about 1 min on one H100)
    python -m benchmarks.gpu_aime_engine --smoke --out /tmp/gpu_aime_engine_smoke.json
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from benchmarks.common import BENCH_DIR, fill_defaults, machine, write_json_at

MODEL = "deepseek-r1-distill-qwen-7b"
LENGTHS_FILE = BENCH_DIR / "paper_lengths.json"


class IdsOnly:
    """A tokenizer for prompts given as ids: no eos (every request decodes its ``max_new`` tokens), pad 0, and texts
    left empty (random weights produce no text worth decoding)."""

    eos_token_id = None
    pad_token_id = 0

    def decode(self, ids, **kwargs) -> str:
        return ""


def r1_snapstream_configs(budgets):
    """SnapStream as ``configs/paper_r1_distill.yaml`` sets it (sink 16, recent half the rest) at ``budgets``."""
    from snapeval.cache import resolve_method

    return [resolve_method("snapstream", budget, sink=16, recent=0.5) for budget in budgets]


def run(args, save=lambda payload: None) -> dict:
    import torch

    from snapeval.engine import Engine, SamplingParams
    from snapeval.run_args import DecodeChoices
    from snapeval.memory_plan import ModelShape, bytes_in_use, device_budget, engine_slots

    from benchmarks.gpu import benchmark_device, build_model, copy_bandwidth, release, sync
    from snapeval.projection import step_bytes

    smoke = args.smoke
    device = benchmark_device(smoke, "gpu_aime_engine")
    started, load_start = time.perf_counter(), os.getloadavg()
    lengths = json.loads(Path(args.lengths).read_text())["tokenizers"][MODEL]["aime24"]
    prompt_tokens = round(sum(lengths) / len(lengths))
    model = build_model(MODEL, device, torch.float32 if smoke else torch.bfloat16, smoke)
    model.generation_config.eos_token_id = None
    shape = ModelShape.of(model)
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(1, shape.vocab, (prompt_tokens,), generator=generator).tolist()
    bandwidth = None if smoke else copy_bandwidth(device, 2.0, 10)["bytes_per_s"]
    payload = {"benchmark": "gpu_aime_engine", "smoke": smoke, "machine": machine(), "model": MODEL,
               "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu", "torch": torch.__version__,
               "load_average_start": load_start, "prompt_tokens": prompt_tokens, "samples": args.samples,
               "plan_new_tokens": args.plan_new, "new_tokens": args.new, "copy_bandwidth_bytes_per_s": bandwidth,
               "budgets": {}}
    tokenizer = IdsOnly()
    for config in r1_snapstream_configs(args.budgets):
        release(device)
        budget = (device_budget(device) if device.type == "cuda"
                  else shape.weight_bytes + args.samples * 2 * step_bytes(shape, config, 1, prompt_tokens, args.plan_new))
        slots = engine_slots(shape, config, prompt_tokens, args.plan_new, requests=args.samples, budget=budget,
                             in_use=bytes_in_use(device) if device.type == "cuda" else shape.weight_bytes)
        engine = Engine(model, tokenizer, config, num_slots=slots, decoding=DecodeChoices(capture=device.type == "cuda"))
        entry = {"slots": slots, "captured": engine.captured}
        for name, params in (("greedy", SamplingParams(max_new_tokens=args.new)),
                             ("sampled", SamplingParams(max_new_tokens=args.new, do_sample=True, temperature=0.6,
                                                        top_p=0.95))):
            sync(device)
            engine.generate([prompt] * args.samples, params)
            sync(device)
            stats = engine.stats
            step_s = stats.decode_seconds / stats.decode_steps
            moved = step_bytes(shape, config, slots, prompt_tokens, args.new)
            floor = moved / bandwidth if bandwidth else None
            entry[name] = {**stats.to_dict(), "step_s": step_s, "floor_bytes": moved, "floor_step_s": floor,
                           "x_floor": step_s / floor if floor else None,
                           "generated_all": stats.generated_tokens == args.samples * args.new}
        engine.release()
        del engine
        payload["budgets"][str(config.budget)] = entry
        payload.update(load_average_end=os.getloadavg(), wall_seconds=time.perf_counter() - started)
        save(payload)
        greedy = entry["greedy"]
        print(f"[{time.perf_counter() - started:6.0f}s] snapstream@{config.budget}: {slots} slots, step "
              f"{greedy['step_s'] * 1e3:.2f} ms" + (f" ({greedy['x_floor']:.2f}x floor)" if greedy["x_floor"] else "")
              + f", sampled {entry['sampled']['step_s'] * 1e3:.2f} ms", flush=True)
    return payload


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU: the same code, meaningless numbers")
    parser.add_argument("--lengths", type=Path, default=LENGTHS_FILE, help="benchmarks.paper_lengths' JSON")
    parser.add_argument("--budgets", type=int, nargs="+", default=None)
    parser.add_argument("--samples", type=int, default=None, help="requests (default 64; the smoke run 8)")
    parser.add_argument("--plan-new", type=int, default=32768, help="new tokens the slots are planned for")
    parser.add_argument("--new", type=int, default=None, help="new tokens decoded per request")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "gpu_aime_engine.json")
    args = parser.parse_args(argv)
    defaults = (dict(budgets=[32, 64], new=6, samples=8) if args.smoke
                else dict(budgets=[4096, 8192, 16384, 32768], new=256, samples=64))
    fill_defaults(args, defaults)
    run(args, lambda payload: write_json_at(args.out, payload))
    print(f"wrote {args.out}")
    return args.out


if __name__ == "__main__":
    main()
