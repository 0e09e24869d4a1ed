"""``snapeval methods``, ``snapeval tasks``, ``snapeval hardware``: what is installed, snapeval's own and what other
packages add through their entry points (``snapeval.methods``, ``snapeval.tasks``, ``snapeval.hardware``), with each
method's settings and defaults. Registering the commands reads nothing; each command reads its registry when run."""
from __future__ import annotations

import json


def register(subparsers) -> None:
    for name, func, what in (
        ("methods", list_methods, "the KV-cache methods installed, with their settings, allowed values and defaults"),
        ("tasks", list_tasks, "the task families installed (and the task folders read), with their lm-eval tasks"),
        ("hardware", list_hardware_targets, "the hardware targets the simulator knows"),
    ):
        p = subparsers.add_parser(name, help=f"list {what}", description=f"List {what}; --json for a machine.")
        p.add_argument("--json", action="store_true", help="print JSON instead of text")
        p.set_defaults(func=func)


def _source(value: str) -> str:
    """``snapeval``, or the top-level module an object named ``module:attr`` (an entry's config, a family's hooks)
    comes from."""
    module = value.split(":", 1)[0].split(".", 1)[0]
    return "snapeval" if module == "snapeval" else module


def _method_record(name: str) -> dict:
    from snapeval.cache.methods import METHOD_TABLE

    info = METHOD_TABLE.get(name)
    settings = [{"name": s.name, "allowed": s.allowed(), "default": s.default_text or s.default, "help": s.help}
                for s in info.settings()]
    return {"method": name, "summary": info.summary, "source": _source(info.config),
            "budget": not METHOD_TABLE.is_reference(name), "settings": settings}


def plugin_fingerprint(entry) -> str | None:
    """What a plugin's listing depends on, read without importing it: its entry point, its package's name and
    version, and the size and time of the file of the module it names (found through its top-level package, which
    is located, not imported). None where the file cannot be found (such a plugin is loaded at every listing)."""
    import importlib.util
    from pathlib import Path

    module = entry.value.split(":", 1)[0].strip()
    top, _, rest = module.partition(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin)
    if rest:
        base = path.parent.joinpath(*rest.split("."))
        path = next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)
        if path is None:
            return None
    try:
        stat = path.stat()
    except OSError:
        return None
    dist = getattr(entry, "dist", None)
    return json.dumps([entry.name, entry.value, getattr(dist, "name", None), getattr(dist, "version", None),
                       str(path), stat.st_size, stat.st_mtime_ns])


def _catalog_cache():
    from snapeval.paths import cache_dir

    return cache_dir() / "plugin-methods.json"


def methods_catalog() -> list[dict]:
    """One record per method of the table: name, summary, source and settings. An installed plugin's record is read
    from the snapeval cache where its fingerprint (:func:`plugin_fingerprint`) is the one recorded, so a listing
    imports a plugin only when it is new or changed (a plugin that imports torch costs its import once); otherwise
    it is loaded, a broken one named in one warning and skipped, as every listing does."""
    import sys

    from snapeval.cache.methods import METHOD_TABLE
    from snapeval.results.store import atomic_write_text

    entries = METHOD_TABLE.plugin_entry_points()
    out = [_method_record(name) for name in METHOD_TABLE.loaded_names()]
    path = _catalog_cache()
    try:
        cached = json.loads(path.read_text(encoding="utf-8")) if entries else {}
        cached = cached if isinstance(cached, dict) else {}
    except (OSError, ValueError):
        cached = {}
    fresh = {}
    for name in sorted(entries):
        key = plugin_fingerprint(entries[name])
        record = cached.get(key) if key is not None else None
        if record is None:
            if not METHOD_TABLE.load_listed(name, stream=sys.stderr):
                continue
            record = _method_record(name)
        if key is not None:
            fresh[key] = record
        out.append(record)
    merged = {**cached, **fresh}  # other environments sharing the cache keep theirs
    if merged != cached:
        try:
            atomic_write_text(path, json.dumps(merged, indent=1, default=str))
        except OSError:
            pass  # a read-only cache: the next listing loads the plugins again
    for family in METHOD_TABLE.allowed().split(", "):
        if family.endswith(":<Name>"):
            out.append({"method": family, "summary": "a family: its own arguments as settings", "source": "snapeval",
                        "budget": True, "settings": []})
    return out


def list_methods(args) -> int:
    catalog = methods_catalog()
    if args.json:
        print(json.dumps(catalog, indent=1, default=str))
        return 0
    for record in catalog:
        budget = "" if record["budget"] else " (no budget)"
        print(f"{record['method']}{budget}: {record['summary']} [{record['source']}]")
        for s in record["settings"]:
            print(f"  {s['name']}: {s['help']}; allowed: {s['allowed']}; default: {s['default']}")
    print("set a setting with `snapeval run --method NAME --method-arg SETTING=VALUE`, or as a key of a sweep's "
          "method entry")
    return 0


def tasks_catalog() -> dict:
    """The task families (snapeval's and installed packages') and every task folder a run reads."""
    from snapeval.tasks.folders import task_folders
    from snapeval.tasks.families import families

    records = []
    for family in families():
        records.append({"family": family.name, "source": _source(family.hooks), "folder": str(family.folder),
                        "tasks": list(family.task_names()), "data": list(family.data_files) or None,
                        "typical_lengths": list(family.typical_lengths) if family.typical_lengths else None})
    return {"families": records, "folders": [str(folder) for folder in task_folders()]}


def list_tasks(args) -> int:
    from snapeval import preflight

    preflight.check_task_folder_env()  # a folder variable naming nothing, or a file: one line, not a silent listing
    catalog = tasks_catalog()
    if args.json:
        print(json.dumps(catalog, indent=1))
        return 0
    for record in catalog["families"]:
        data = ", ".join(record["data"]) if record["data"] else "generated"
        print(f"{record['family']} [{record['source']}]: {', '.join(record['tasks'])} (data: {data})")
    print("task folders read:", *catalog["folders"], sep="\n  ")
    return 0


def hardware_catalog() -> list[dict]:
    """One record per hardware target: name, kind, sockets, where it comes from and its description."""
    from snapeval.simulator.hardware import get_hardware, hardware_plugins, list_hardware

    import sys

    from snapeval.errors import SnapevalError

    plugins = hardware_plugins()
    out = []
    for name in list_hardware():
        try:
            spec = get_hardware(name)
        except SnapevalError as exc:  # a broken plugin: named in one warning, the others listed
            print(f"snapeval: warning: {exc}; skipped", file=sys.stderr)
            continue
        source = _source(plugins[name].value) if name in plugins else "snapeval"
        out.append({"hardware": name, "kind": spec.kind, "sockets": spec.sockets, "source": source,
                    "description": spec.description.strip().splitlines()[0] if spec.description.strip() else ""})
    return out


def list_hardware_targets(args) -> int:
    catalog = hardware_catalog()
    if args.json:
        print(json.dumps(catalog, indent=1))
        return 0
    for record in catalog:
        print(f"{record['hardware']} [{record['source']}]: {record['kind']}, {record['sockets']} socket(s). "
              f"{record['description']}")
    return 0
