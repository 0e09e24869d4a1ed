"""Continuous batching vs padded batches vs one request at a time (issue: static-shape engine).

SmolLM2-135M-Instruct, float32, 2 threads, SnapStream budget 1024, 8 slots / batch size 8. 32 requests: real
LongBench-v2 documents cut to prompts of 100..2,000 tokens, each followed by a real instruction whose natural
answer length ranges from a few words to a long essay; every request may generate up to 512 tokens and stops at
eos (greedy; no forced lengths). Three runs over the same requests in one process:

- ``engine``: :class:`snapeval.engine.Engine` (batch-1 prefill, continuous batching over 8 static slots);
- ``hf_batched``: :func:`snapeval.generate` on padded batches of 8, in lm-eval's order (longest prompt first, as
  lm-eval's Hugging Face model batches ``generate_until`` requests), each batch decoding until its longest row stops;
- ``one_at_a_time``: :func:`snapeval.generate` per request.

``--random-llama-1b --device cuda``: the same three runs with a random-weight 1.07B Llama in bfloat16 at long context
(see ``random_llama_1b``; forced, evenly spread generation lengths, since random weights never stop).

Reports generated tokens/s (generated tokens / wall time, prefill included), time to first token (from the start
of the run: queueing included), wall time, and whether the greedy outputs are identical. ``--compile`` also times
the engine's decode step eagerly and under ``torch.compile`` (``--compile-only``: just that, in
results/bench/engine_compile.json). Writes results/bench/engine.json.

    python -m benchmarks.engine [--quick] [--compile | --compile-only] [--random-llama-1b --device cuda]
    # on 2 idle cores: full about 25 min, --quick about 5 min, --compile-only about 1 min
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from benchmarks.common import data_dir, machine, write_json

INSTRUCTIONS = [  # (instruction, expected answer length): short answers to long essays
    "In one word, what language is the text above written in?",
    "Answer with a single short sentence: what is the text above about?",
    "Give a title of at most ten words for the text above.",
    "Summarise the text above in two sentences.",
    "List three key points of the text above as short bullet points.",
    "Explain the main argument of the text above in one paragraph.",
    "Write a detailed summary of the text above, section by section.",
    "Write a long essay discussing the ideas of the text above, with an introduction, several sections and a conclusion.",
]


def build_requests(tokenizer, count: int, min_len: int, max_len: int) -> list[list[int]]:
    """``count`` chat prompts of evenly spread lengths in ``[min_len, max_len]`` tokens, each a different document."""
    path = data_dir() / "longbench_v2" / "longbench_v2.jsonl"
    with open(path) as f:
        docs = [json.loads(line)["context"] for line in f]
    docs = [d for d in docs if d.isascii()][:count] if sum(d.isascii() for d in docs) >= count else docs[:count]
    lengths = [round(min_len + (max_len - min_len) * i / max(1, count - 1)) for i in range(count)]
    order = torch.randperm(count, generator=torch.Generator().manual_seed(0)).tolist()  # mix lengths and tasks
    prompts = []
    for i in range(count):
        length, instruction = lengths[order[i]], INSTRUCTIONS[i % len(INSTRUCTIONS)]
        overhead = len(_chat(tokenizer, instruction))
        doc_ids = tokenizer(docs[i][: 12 * length], add_special_tokens=False).input_ids[: max(1, length - overhead)]
        prompt = _chat(tokenizer, tokenizer.decode(doc_ids) + "\n\n" + instruction)
        while len(prompt) > length:  # decoding and re-encoding can merge or split a few tokens
            doc_ids = doc_ids[: len(doc_ids) - (len(prompt) - length)]
            prompt = _chat(tokenizer, tokenizer.decode(doc_ids) + "\n\n" + instruction)
        prompts.append(prompt)
    return prompts


def _chat(tokenizer, text: str) -> list[int]:
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def summarize(name, outputs, ttft, wall, extra=None) -> dict:
    generated = sum(len(o) for o in outputs)
    return {
        "run": name,
        "generated_tokens": generated,
        "wall_s": wall,
        "generated_tokens_per_s": generated / wall,
        "ttft_mean_s": statistics.fmean(ttft),
        "ttft_median_s": statistics.median(ttft),
        "ttft_max_s": max(ttft),
        **(extra or {}),
    }


def run_engine(model, tokenizer, prompts, budget, slots, limits):
    from snapeval.engine import Engine, SamplingParams

    engine = Engine(model, tokenizer, budget, num_slots=slots)
    start = time.perf_counter()
    done = engine.generate(prompts, [SamplingParams(max_new_tokens=n) for n in limits])
    wall = time.perf_counter() - start
    stats = engine.stats.to_dict()
    outs = [c.token_ids for c in done]
    return outs, summarize("engine", outs, [c.time_to_first_token for c in done], wall, {"engine_stats": stats})


def run_batched(model, tokenizer, prompts, budget, batch, limits):
    """Padded batches decode until their longest row stops; a row's own limit only cuts its output afterwards."""
    from snapeval import generate

    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))  # lm-eval: longest context first
    outs, ttft = [None] * len(prompts), [0.0] * len(prompts)
    steps = []
    start = time.perf_counter()
    for b in range(0, len(order), batch):
        rows = order[b : b + batch]
        t0 = time.perf_counter() - start
        result = generate(model, tokenizer, [prompts[i] for i in rows], config=budget,  # padded batches, eager
                          max_new_tokens=max(limits[i] for i in rows), capture="false")
        steps.append(result.decode_steps + 1)
        for i, out in zip(rows, result):
            outs[i], ttft[i] = out.token_ids[: limits[i]], t0 + result.prefill_seconds
    wall = time.perf_counter() - start
    return outs, summarize("hf_batched", outs, ttft, wall, {"batch_steps": steps})


def run_single(model, tokenizer, prompts, budget, limits):
    from snapeval import generate

    outs, ttft = [], []
    start = time.perf_counter()
    for prompt, limit in zip(prompts, limits):
        t0 = time.perf_counter() - start
        result = generate(model, tokenizer, [prompt], config=budget, max_new_tokens=limit, capture="false")
        outs.append(result[0].token_ids)
        ttft.append(t0 + result.prefill_seconds)
    return outs, summarize("one_at_a_time", outs, ttft, time.perf_counter() - start)


def random_llama_1b(tokenizer, dtype: str, device: str):
    """A random-weight Llama with Llama-3.2-1B's architecture (16 layers, hidden 2,048, 32 query and 8 KV heads of
    64, MLP 8,192, tied embeddings) over ``tokenizer``'s vocabulary: 1.07B parameters with SmolLM2's 49,152 tokens,
    so prompts and stops stay real text. Seeded: the same weights on every call."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
                         rope_theta=500000.0, tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(getattr(torch, dtype)).eval()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def time_decode_step(model, tokenizer, budget, slots, steps=20, rounds=3, *, mode=True, label="compiled",
                     sync=lambda: None) -> dict:
    """Eager vs ``torch.compile`` (``mode``: True or a compile mode such as ``"reduce-overhead"``, reported under
    ``label``) decode step of ``slots`` slots (random cache contents, one slot partly empty).

    Both engines are built and warmed up first; then ``rounds`` timing rounds of ``steps`` steps alternate between
    them, so a change of machine load hits both sides alike. ``sync`` waits for the device (CUDA is asynchronous)
    before each clock reading. Reports every round and the median.
    """
    from snapeval.engine import Engine

    engines, first_call = {}, {}
    for name, compiled in (("eager", False), (label, mode)):
        engine = engines[name] = Engine(model, tokenizer, budget, num_slots=slots, compile=compiled)
        for layer in engine.cache.layers:  # full slots, except the last entries of slot 0: the masked path
            layer.keys.normal_(), layer.values.normal_(), layer.positions.fill_(0)
            layer.positions[0, :, -min(100, budget // 2):] = -1
        with torch.inference_mode():
            sync()
            t0 = time.perf_counter()
            engine.step_rows()
            sync()
            first_call[name] = time.perf_counter() - t0
            for _ in range(2):
                engine.step_rows()
    round_ms = {name: [] for name in engines}
    with torch.inference_mode():
        for _ in range(rounds):
            for name, engine in engines.items():
                sync()
                t0 = time.perf_counter()
                for _ in range(steps):
                    engine.step_rows()
                sync()
                round_ms[name].append((time.perf_counter() - t0) / steps * 1e3)
    out = {name: {"step_ms": statistics.median(ms), "rounds_ms": ms, "first_call_s": first_call[name]}
           for name, ms in round_ms.items()}
    out.update(slots=slots, budget=budget, steps_per_round=steps, rounds=rounds,
               speedup=out["eager"]["step_ms"] / out[label]["step_ms"], load_average=os.getloadavg())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="16 requests of 100..1,000 tokens, up to 128 new tokens, 4 slots (a loaded machine)")
    parser.add_argument("--compile", action="store_true", help="also time the decode step under torch.compile")
    parser.add_argument("--compile-only", action="store_true",
                        help="only time the decode step, eager vs torch.compile (writes engine_compile.json)")
    parser.add_argument("--random-llama-1b", action="store_true",
                        help="a random-weight 1.07B Llama (for a GPU) at long context: prompts of 2,000..16,000 tokens; "
                             "random weights never stop, so request i generates a forced 16..512 tokens (evenly "
                             "spread); writes engine_random_llama_1b.json")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default=None, help="default: float32 (SmolLM2), bfloat16 (--random-llama-1b)")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--budget", type=int, default=1024)
    parser.add_argument("--min-len", type=int, default=None, help="shortest prompt (tokens)")
    parser.add_argument("--max-len", type=int, default=None, help="longest prompt (tokens)")
    parser.add_argument("--max-new", type=int, default=None, help="most new tokens per request")
    parser.add_argument("--out", default=None, help="file name under results/bench (default: engine[_random_llama_1b]"
                        "[_quick].json; engine[...]_custom.json when a size option above is changed)")
    args = parser.parse_args()
    custom = (any(v is not None for v in (args.min_len, args.max_len, args.max_new, args.dtype))
              or (args.requests, args.slots, args.budget) != (32, 8, 1024))
    if args.device == "cpu":
        torch.set_num_threads(2)
    from snapeval import load_model
    from snapeval.models import load_tokenizer

    count, min_len, max_len, max_new = (16, 100, 1000, 128) if args.quick else (args.requests, 100, 2000, 512)
    if args.random_llama_1b:
        min_len, max_len = 2000, 16000
    min_len, max_len = args.min_len or min_len, args.max_len or max_len
    max_new = args.max_new or max_new
    if args.quick:
        args.slots = 4
    if args.random_llama_1b:
        model_name, dtype = "random-llama-1b", args.dtype or "bfloat16"
        tokenizer = load_tokenizer("smollm2-135m-instruct")
        model = random_llama_1b(tokenizer, dtype, args.device)
        limits = [round(16 + (max_new - 16) * i / max(1, count - 1)) for i in range(count)]  # forced, spread
    else:
        model_name, dtype = "smollm2-135m-instruct", args.dtype or "float32"
        model, tokenizer = load_model(model_name, dtype=dtype, device=args.device)
        limits = [max_new] * count  # real stops: eos, or the limit
    if args.compile_only:
        step = time_decode_step(model, tokenizer, args.budget, args.slots)
        payload = {"benchmark": "engine_decode_step_compile", "model": model_name, "dtype": dtype,
                   "device": args.device, "budget": args.budget, **step, "machine": machine()}
        path = write_json(args.out or "engine_compile.json", payload)
        print(f"decode step of {args.slots} slots: eager {step['eager']['rounds_ms']} ms, compiled "
              f"{step['compiled']['rounds_ms']} ms (first call {step['compiled']['first_call_s']:.0f} s): "
              f"{step['speedup']:.2f}x; wrote {path}")
        return
    prompts = build_requests(tokenizer, count, min_len, max_len)
    load = os.getloadavg()
    runs, outputs = [], {}
    for name, fn in [
        ("engine", lambda: run_engine(model, tokenizer, prompts, args.budget, args.slots, limits)),
        ("hf_batched", lambda: run_batched(model, tokenizer, prompts, args.budget, args.slots, limits)),
        ("one_at_a_time", lambda: run_single(model, tokenizer, prompts, args.budget, limits)),
    ]:
        outputs[name], summary = fn()
        runs.append(summary)
        print(f"{name:>14}: {summary['generated_tokens']} tokens in {summary['wall_s']:.1f} s = "
              f"{summary['generated_tokens_per_s']:.1f} tok/s, TTFT mean {summary['ttft_mean_s']:.1f} s", flush=True)
    reference = outputs["one_at_a_time"]
    for run in runs:
        same = [a == b for a, b in zip(outputs[run["run"]], reference)]
        run["identical_to_one_at_a_time"] = sum(same)
    by = {r["run"]: r for r in runs}
    payload = {
        "benchmark": "engine",
        "model": model_name,
        "dtype": dtype,
        "device": args.device,
        "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
        "method": "snapstream",
        "budget": args.budget,
        "slots_or_batch_size": args.slots,
        "requests": count,
        "quick": args.quick,
        "prompt_tokens": sorted(len(p) for p in prompts),
        "max_new_tokens": max_new,
        "forced_lengths": bool(args.random_llama_1b),
        "generated_lengths": [len(o) for o in reference],
        "stopped_at_eos": sum(o[-1] == tokenizer.eos_token_id for o in reference),
        "runs": runs,
        "engine_speedup_vs_hf_batched": by["engine"]["generated_tokens_per_s"] / by["hf_batched"]["generated_tokens_per_s"],
        "engine_speedup_vs_one_at_a_time": by["engine"]["generated_tokens_per_s"] / by["one_at_a_time"]["generated_tokens_per_s"],
        "load_average_before": load,
        "load_average_after": os.getloadavg(),
        "machine": machine(),
    }
    if args.compile:
        payload["decode_step_compile"] = time_decode_step(model, tokenizer, args.budget, args.slots)
        print("decode step:", payload["decode_step_compile"])
    name = ("engine_random_llama_1b" if args.random_llama_1b else "engine") + ("_quick" if args.quick else "")
    path = write_json(args.out or (f"{name}_custom.json" if custom else f"{name}.json"), payload)
    print(f"speedup vs HF batched: {payload['engine_speedup_vs_hf_batched']:.2f}x, vs one at a time: "
          f"{payload['engine_speedup_vs_one_at_a_time']:.2f}x; identical greedy outputs: "
          + ", ".join(f"{r['run']} {r['identical_to_one_at_a_time']}/{count}" for r in runs) + f"; wrote {path}")


if __name__ == "__main__":
    main()
