"""The paper grids projected in GPU-hours: every task x model group of ``configs/paper_llama.yaml`` and
``configs/paper_r1_distill.yaml`` (:func:`project_config`), over the tasks' real prompt lengths
(``results/bench/paper_lengths.json``, written by ``python -m benchmarks.paper_lengths``), with
:class:`~snapeval.projection.rates.Rates` scaled to each model's shape and restated for the chosen GPU
(:func:`project_grids`). Pure arithmetic: no model, no device."""
from __future__ import annotations

import re
from dataclasses import asdict

from snapeval.errors import SnapevalError
from snapeval.paths import repo_root, shipped_tasks_dir
from snapeval.projection.rates import Rates
from snapeval.projection.schedule import Documents, project_group

#: The model the rates are measured on (its architecture; random weights).
MODEL = "llama-3.1-8b-instruct"
#: The sweep configs of the paper grids (relative to the checkout).
PAPER_CONFIGS = ("configs/paper_llama.yaml", "configs/paper_r1_distill.yaml")
#: The tokenizers' prompt lengths of the paper tasks (``python -m benchmarks.paper_lengths``).
LENGTHS_FILE = repo_root() / "results" / "bench" / "paper_lengths.json"
#: The tokenizer family of each preset of the paper configs (``paper_lengths.json``'s keys).
FAMILY = {"llama-3.1-8b-instruct": "llama-3.1-8b-instruct", "deepseek-r1-distill-llama-8b": "llama-3.1-8b-instruct",
          "deepseek-r1-distill-llama-70b": "llama-3.1-8b-instruct"}
QWEN_FAMILY = "deepseek-r1-distill-qwen-7b"


def longbench_limit(preset: str, max_new: int, template: int, metadata: dict) -> int:
    """The prompt limit of a LongBench-v2 run (docs/tasks.md): ``max_input_tokens``, else pred.py's 120,000 for a
    model it lists, else the model's context less the generation, the template and the margin."""
    from snapeval.models.presets import get_preset
    from snapeval.tasks import longbench

    if "max_input_tokens" in metadata:
        return int(metadata["max_input_tokens"])
    preset_spec = get_preset(preset)
    listed = longbench.official_limit(preset_spec.hub_id)
    return listed or longbench.fallback_limit(preset_spec.max_context, max_new, template)

def task_defaults(name: str) -> dict[str, int]:
    """A built-in task's own ``max_gen_toks`` (its first: a two-pass task's first pass) and ``repeats``, read from
    its YAML under ``tasks/`` (what the sweep runs when a config does not set them)."""
    path = next((p for p in sorted(shipped_tasks_dir().rglob("*.yaml"))
                 if re.search(rf"^task:\s*{re.escape(name)}\s*$", p.read_text(), re.MULTILINE)), None)
    if path is None:
        raise SnapevalError(f"task={name!r} has no YAML under {shipped_tasks_dir()}; allowed: a built-in task")
    text = path.read_text()
    found = {key: re.search(rf"^\s*{key}:\s*(\d+)", text, re.MULTILINE) for key in ("max_gen_toks", "repeats")}
    return {key: int(match.group(1)) for key, match in found.items() if match}

def longbench_documents(prompts: list[int], documents: list[int], common: list[int], limit: int) -> Documents:
    """LongBench-v2's questions on one document as ``BranchSet.generate`` takes them on a GPU
    (:func:`snapeval.memory_plan.document_families`): a family per document asked more than once, whose shared prefix
    is what its prompts share from their start (``common``, before the cut) where none is cut, else at most the
    first half the cut keeps (pred.py's middle cut keeps ``limit // 2`` tokens of the start); at least
    :data:`~snapeval.memory_plan.MIN_SHARED_DOCUMENT` tokens, and a suffix left to every member."""
    from snapeval.memory_plan import MIN_SHARED_DOCUMENT

    members: dict[int, list[int]] = {}
    for i, document in enumerate(documents):
        members.setdefault(document, []).append(i)
    families, heads = [None] * len(prompts), [0] * len(prompts)
    for group in members.values():
        cut = any(prompts[i] > limit for i in group)
        head = min(common[group[0]], limit // 2) if cut else common[group[0]]
        head = min(head, min(min(prompts[i], limit) for i in group) - 1)
        if len(group) > 1 and head >= MIN_SHARED_DOCUMENT:
            for i in group:
                families[i], heads[i] = group[0], head
    return Documents(families, heads)

def task_items(task, preset: str, lengths: dict, new_tokens: dict[str, int]) -> list[dict]:
    """The passes of one task for one model: each ``{"items": [(prompt, new)], "prefills": per item}``. Prompt
    lengths come from ``lengths`` (``paper_lengths.json``) in the model's tokenizer family; a pass generates its
    ``max_gen_toks`` (the config's, else the task's own; or ``new_tokens[task]``, a mean), each item ``repeats``
    times (lm-eval's samples)."""
    family = lengths["tokenizers"][FAMILY.get(preset, QWEN_FAMILY)]
    template = family["template_tokens"]
    defaults = task_defaults(task.name)
    generation, metadata = {**defaults, **dict(task.generation)}, dict(task.metadata)
    name = task.name
    new = int(new_tokens.get(name, generation["max_gen_toks"]))
    repeats = defaults.get("repeats", 1)
    if name in ("longbench_v2", "longbench_v2_cot"):
        limit = longbench_limit(preset, int(generation["max_gen_toks"]), template, metadata)
        first = {"items": [(min(n, limit) + template, new) for n in family[name]], "prefills": 1}
        if f"{name}_document_common" in family:  # questions on one document: its prefill once, on a GPU
            first["documents"] = longbench_documents(family[name], family["longbench_v2_documents"],
                                                     family[f"{name}_document_common"], limit)
        if name == "longbench_v2":
            return [first]
        answer = new_tokens.get("longbench_v2_cot_answer", 128)
        second = [(n + new, answer) for n in family["longbench_v2_cot_answer"]]
        return [first, {"items": second, "prefills": "each"}]
    if name.startswith("aime24"):
        return [{"items": [(n, new) for n in family["aime24"] for _ in range(repeats)], "prefills": 1}]
    if name.startswith("livecodebench"):
        key = "livecodebench_generic" if name == "livecodebench_generic" else "livecodebench_r1"
        return [{"items": [(n, new) for n in family[key] for _ in range(repeats)], "prefills": 1}]
    if name.startswith("snapeval_"):  # synthetic: num_samples per sequence length, the prompt at that length
        count = int(metadata.get("num_samples", 50))
        return [{"items": [(int(length), new) for length in metadata["max_seq_lengths"] for _ in range(count)],
                 "prefills": 1}]
    raise SnapevalError(f"task={name!r} has no item lengths in the projection; allowed: longbench_v2, "
                        "longbench_v2_cot, aime24*, livecodebench*, snapeval_*")

def project_config(path: str, lengths: dict, rates: Rates, *, device_bytes: float, new_tokens: dict[str, int],
                   chunk: int | None = None, host_bytes: float | None = None, one_step: bool = True) -> dict:
    """Every model x task group of one sweep config: seconds and GPU-hours per group, per task, per model, all;
    ``host_bytes``: host memory per GPU (less the plan's margin) where held branches may wait (None: none);
    ``one_step``: a group's configurations in rows may share one decode step (the sweep's ``triton`` kernel)."""
    from snapeval.memory_plan import MARGIN_BYTES, MARGIN_FRACTION, ModelShape
    from snapeval.sweep.grid import expand_grid
    from snapeval.sweep.parse import load_config

    config = load_config(repo_root() / path)
    groups: dict[tuple, list] = {}
    for cell in expand_grid(config):
        groups.setdefault((cell.model.pretrained, cell.task.name, cell.seed), []).append(cell)
    out, total_gpu_h = {"config": path, "groups": []}, 0.0
    for (preset, task_name, seed), cells in groups.items():
        gpus = max(1, int(cells[0].model.resources.num_gpus or 1))
        shape = ModelShape.of_preset(preset, dtype_bytes=2)
        budget = int(gpus * (device_bytes - max(MARGIN_BYTES, MARGIN_FRACTION * device_bytes)))
        host_budget = None if not host_bytes else int(gpus * host_bytes * (1 - MARGIN_FRACTION))
        scaled = rates.for_shape(shape)
        configs = [cell.config for cell in cells]
        parts = []
        for stage in task_items(cells[0].task, preset, lengths, new_tokens):
            prefills = len(configs) if stage["prefills"] == "each" else 1
            parts.append(project_group(shape, configs, stage["items"], scaled, budget=budget, chunk=chunk,
                                       prefills=prefills, host_budget=host_budget,
                                       documents=stage.get("documents"), one_step=one_step))
        seconds = sum(p["seconds"] for p in parts)
        entry = {"model": preset, "task": task_name, "seed": seed, "gpus": gpus, "configurations": len(configs),
                 "hours": seconds / 3600, "gpu_hours": gpus * seconds / 3600,
                 "passes": [{k: v for k, v in p.items() if k not in ("decode_s_per_configuration", "steps")}
                            for p in parts]}
        out["groups"].append(entry)
        total_gpu_h += entry["gpu_hours"]
    out["gpu_hours"] = total_gpu_h
    out["gpu_hours_by_task"] = {}
    for entry in out["groups"]:
        out["gpu_hours_by_task"][entry["task"]] = out["gpu_hours_by_task"].get(entry["task"], 0.0) + entry["gpu_hours"]
    return out

def hardware_sheet(name: str) -> dict:
    """The simulator's sheet of ``name`` (:func:`snapeval.simulator.hardware.get_hardware`): its socket's figures
    and its name."""
    from snapeval.simulator.hardware import get_hardware

    spec = get_hardware(name)
    return {"name": spec.name, **asdict(spec.socket)}

def device_sheet(device_name: str) -> str | None:
    """The simulator's sheet for a CUDA device's name (``H100``/``H200``), None for any other."""
    for key in ("h200", "h100"):
        if key.upper() in device_name.upper():
            return key
    return None

def paper_llama_configs():
    """The 16 configurations of ``configs/paper_llama.yaml``, resolved as the sweep resolves them."""
    from snapeval.sweep.grid import expand_grid
    from snapeval.sweep.parse import load_config

    seen = {}
    for cell in expand_grid(load_config(repo_root() / PAPER_CONFIGS[0])):
        seen.setdefault(cell.config.label, cell.config)
    return list(seen.values())

def project_grids(args, rates: Rates, lengths: dict, device_bytes: float) -> dict:
    """Both paper configs projected with ``rates`` (restated for ``args.as_hardware`` when they were measured on
    another GPU kind with a sheet), printed, and returned as the payload's ``grids`` entries. ``args``: the options
    of :func:`snapeval.projection.cli.add_projection_flags` (``as_hardware``, ``new_tokens``, ``host_gib``,
    ``chunk``, ``shared_step``), as parsed."""
    measured_sheet = device_sheet(rates.device)
    as_rates = rates
    if args.as_hardware and measured_sheet and args.as_hardware != measured_sheet:
        as_rates = rates.on_hardware(hardware_sheet(measured_sheet), hardware_sheet(args.as_hardware))
    if args.as_hardware:
        device_bytes = hardware_sheet(args.as_hardware)["hbm_bytes"]
    new_tokens = {task: int(n) for task, n in (pair.split("=", 1) for pair in args.new_tokens)}
    host_bytes = args.host_gib * 2**30 if args.host_gib else None
    grids = {path: project_config(path, lengths, as_rates, device_bytes=device_bytes, new_tokens=new_tokens,
                                  chunk=args.chunk, host_bytes=host_bytes, one_step=args.shared_step != "false")
             for path in PAPER_CONFIGS}
    llama = grids[PAPER_CONFIGS[0]]["gpu_hours_by_task"]
    for path, grid in grids.items():
        print(f"{path}: {grid['gpu_hours']:.1f} GPU-hours ({as_rates.device}); by task: "
              + ", ".join(f"{k} {v:.1f}" for k, v in grid["gpu_hours_by_task"].items()), flush=True)
    caveats = ["every generation runs to its max_gen_toks unless --new-tokens gives a mean: an upper bound",
               f"a configuration the plan decodes alone (listed per pass) steps at {as_rates.alone_factor:.2f}x the "
               f"fitted step in a captured engine of one row ({'measured' if as_rates.alone_measured else 'assumed'}), "
               f"{as_rates.eager_factor:.2f}x in the eager loop where the plan has no room for that row "
               f"({'measured' if as_rates.eager_measured else 'memory_plan.EAGER_STEP_FACTOR'})",
               "a model split over GPUs runs its layers one after another: its hours are one GPU's, times its GPUs",
               "the configurations in rows share one decode step where the plan says so (--shared-step auto, the "
               "sweep's triton kernel): priced as one step's fixed time plus the weights once and every row's bytes, "
               "which a measured slice checks (--shared-step false: an engine each)"
               if args.shared_step != "false" else "every configuration in rows decodes in its own engine",
               f"held branches may wait in {args.host_gib:g} GiB of host memory per GPU (--host-gib: a DGX H100's "
               f"2 TiB over its 8 GPUs), crossing the host link at {as_rates.host_bandwidth / 1e9:.1f} GB/s each way "
               f"({'measured' if as_rates.host_measured else 'assumed: memory_plan.HOST_LINK_BYTES_PER_S'})"
               if args.host_gib else "held branches stay on the device (--host-gib 0)"]
    return {"grids": grids, "projected_as": as_rates.device, "projected_rates": asdict(as_rates), "caveats": caveats,
            "device_bytes": device_bytes, "host_bytes_per_gpu": host_bytes,
            "new_tokens": new_tokens or "max_gen_toks (an upper bound)",
            "paper_llama_longbench_pair_gpu_hours": llama.get("longbench_v2", 0) + llama.get("longbench_v2_cot", 0)}
