"""Seconds of the bad-input refusals and of plugin listings, as ratios measured in one run (the tests assert what is
imported before a refusal, never a time; the seconds live here).

Each command runs in a fresh interpreter, every case ``--repeats`` times interleaved with its baseline, and the median
is kept: ``snapeval --version`` is the baseline of the refusals (the cost of starting Python and snapeval),
``snapeval methods`` / ``snapeval hardware`` without a plugin the baseline of the same listings with the guide's
worked example installed (its entry in a torch-free module) and, for contrast, with an old-style one-file plugin
that imports torch at import. The load average is recorded before and after (other work on the machine stretches
every figure alike; the ratios are what to compare).

    python -m benchmarks.bad_input [--repeats 5]     # writes results/bench/bad_input.json
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import REPO, write_json

REFUSALS = {
    "run: task typo": ["run", "--method", "full", "--tasks", "snapeval_paskey"],
    "run: missing data": ["run", "--method", "full", "--tasks", "aime24_snapeval", "--data-dir", "{tmp}"],
    "run: unwritable --output": ["run", "--method", "full", "--tasks", "snapeval_passkey", "--output", "/proc/x/y.json"],
    "sweep --dry-run: unknown task": ["sweep", "{typo_config}", "--dry-run"],
    "sweep: --ray-address garbage:0": ["sweep", "{config}", "--executor", "ray", "--ray-address", "garbage:0"],
    "simulate: past the context": ["simulate", "--model", "smollm2-135m-instruct", "--prompt-len", "100000"],
    "report: no such folder": ["report", "{tmp}/none"],
    "run: --method-arg budget=512": ["run", "--method", "snapstream", "--budget", "64", "--tasks", "snapeval_passkey",
                                     "--method-arg", "budget=512"],
    "run: --seed 2**32": ["run", "--method", "full", "--tasks", "snapeval_passkey", "--seed", "4294967296"],
    "run: --device-map {\"\": 0} on a CPU": ["run", "--method", "full", "--tasks", "snapeval_passkey", "--device-map",
                                          '{"": 0}'],
    "sweep: a damaged manifest.json": ["sweep", "{config}", "--out", "{damaged}"],
    # issue #62: snapeval-lm-eval's model_args checked before lm-eval loads (the tool named first)
    "snapeval-lm-eval: model_args max_gen_toks=x": ["@snapeval-lm-eval", "--model", "snapeval", "--model_args",
                                                     "method=full,max_gen_toks=x", "--tasks", "snapeval_passkey"],
    "snapeval-lm-eval: model_args method=lru": ["@snapeval-lm-eval", "--model", "snapeval", "--model_args",
                                                "method=lru,budget=64", "--tasks", "snapeval_passkey"],
    "snapeval-lm-eval: model_args device=foo": ["@snapeval-lm-eval", "--model", "snapeval", "--model_args",
                                                "method=full,device=foo", "--tasks", "snapeval_passkey"],
}


def _time(argv: list[str], env: dict) -> tuple[float, int]:
    start = time.perf_counter()
    out = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    return time.perf_counter() - start, out.returncode


def _plugin_site(root: Path, style: str) -> Path:
    """The worked example installed as a package: ``guide`` (tests/fixtures/random_method/, entry torch-free) or
    ``one_file`` (the same code in one module that imports torch)."""
    site = root / style
    package = site / "snapeval_random"
    shutil.copytree(REPO / "tests" / "fixtures" / "random_method", package, ignore=shutil.ignore_patterns("__pycache__"))
    if style == "one_file":
        (package / "__init__.py").write_text((package / "__init__.py").read_text() + "\nimport torch  # noqa\n")
    info = site / "snapeval_extras-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: snapeval-extras\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[snapeval.methods]\nrandom = snapeval_random:ENTRY\n")
    return site


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    snapeval = str(Path(sys.executable).parent / "snapeval")
    base_env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(REPO)}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = root / "c.yaml"
        config.write_text("name: b\nmodels: [smollm2-135m-instruct]\ntasks: [{name: snapeval_passkey, limit: 2}]\n"
                          "methods: [full]\n")
        typo = root / "typo.yaml"
        typo.write_text(config.read_text().replace("snapeval_passkey", "snapeval_paskey"))
        damaged = root / "damaged"
        damaged.mkdir()
        (damaged / "manifest.json").write_text('{"format": "snapeval-manif')
        fill = {"tmp": str(root), "config": str(config), "typo_config": str(typo), "damaged": str(damaged)}
        sites = {style: _plugin_site(root, style) for style in ("guide", "one_file")}
        envs = {"none": base_env, **{s: {**base_env, "PYTHONPATH": f"{site}{os.pathsep}{REPO}"}
                                     for s, site in sites.items()}}
        cases = {"baseline: snapeval --version": (["--version"], "none")}
        cases.update({name: ([a.format(**fill) for a in argv], "none") for name, argv in REFUSALS.items()})
        for listing in ("methods", "hardware"):
            for style in envs:
                cases[f"{listing}, plugin: {style}"] = ([listing], style)
        seconds: dict[str, list[float]] = {name: [] for name in cases}
        codes: dict[str, int] = {}
        for _ in range(args.repeats):  # interleaved: a load change touches every case alike
            for name, (argv, env) in cases.items():
                tool = [str(Path(sys.executable).parent / argv[0][1:]), *argv[1:]] if argv[0].startswith("@") \
                    else [snapeval, *argv]
                took, code = _time(tool, envs[env])
                seconds[name].append(took)
                codes[name] = code
    median = {name: statistics.median(values) for name, values in seconds.items()}
    base = median["baseline: snapeval --version"]
    refusals = {name: {"median_s": round(median[name], 3), "ratio_to_version": round(median[name] / base, 2),
                       "exit": codes[name]} for name in REFUSALS}
    listings = {}
    for listing in ("methods", "hardware"):
        plain = median[f"{listing}, plugin: none"]
        listings[listing] = {style: {"median_s": round(median[f"{listing}, plugin: {style}"], 3),
                                     "ratio_to_no_plugin": round(median[f"{listing}, plugin: {style}"] / plain, 2)}
                             for style in envs}
    payload = {"command": "python -m benchmarks.bad_input --repeats " + str(args.repeats),
               "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "cores": os.cpu_count(),
               "baseline_version_s": round(base, 3), "refusals": refusals, "listings": listings}
    path = write_json("bad_input.json", payload)
    print(path)
    for name, record in refusals.items():
        print(f"{name:34} exit {record['exit']}  {record['median_s']:6.2f} s  {record['ratio_to_version']:5.2f}x --version")
    for listing, styles in listings.items():
        print(listing, {s: r["ratio_to_no_plugin"] for s, r in styles.items()})
    print("load", payload["loadavg_before"], "->", payload["loadavg_after"])


if __name__ == "__main__":
    main()
