"""Typed per-cell results, built from lm-eval's results dict and snapeval's measurements of the run.

One :class:`CellResult` is one finished cell of a sweep: its identity, every metric lm-eval reported (with stderr
and sample count), the generated text of every sample (what regression checks compare for greedy cells), and the
KV-cache bytes and tokens/s measured during the run. It round-trips through JSON (``to_json`` / ``from_json``).
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from snapeval.errors import SnapevalError, is_int

ID_LENGTH = 16  # hex digits of the SHA-256 kept in file names (64 bits: no collision in any realistic results dir)


def canonical_json(obj: Any) -> str:
    """Key-sorted, whitespace-free JSON: the same content always gives the same bytes."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def identity_hash(identity: dict) -> str:
    """A cell's id: the first :data:`ID_LENGTH` hex digits of the SHA-256 of its identity's canonical JSON."""
    return hashlib.sha256(canonical_json(identity).encode()).hexdigest()[:ID_LENGTH]

SCHEMA_VERSION = 1


def _number(value: Any) -> float | None:
    """lm-eval writes a missing stderr as the string "N/A"; keep numbers, map the rest to None."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


@dataclass(frozen=True)
class MetricValue:
    """One aggregated metric of one (sub)task: ``metric`` under lm-eval filter ``filter``."""

    subtask: str
    metric: str
    filter: str
    value: float | None
    stderr: float | None
    n: int
    higher_is_better: bool = True

    @property
    def key(self) -> str:
        """lm-eval's own spelling, ``metric,filter``."""
        return f"{self.metric},{self.filter}"


@dataclass(frozen=True)
class SampleRecord:
    """One document of one (sub)task: what the model generated and how each metric/filter scored it."""

    subtask: str
    doc_id: int
    target: str
    generations: tuple[str, ...]  # raw generated text, one per sample (a task's repeats); empty for log-likelihood
    scores: dict[str, float]  # {"metric,filter": per-sample score}
    greedy: bool
    #: Items that are not independent share a cluster (questions on one document, a problem's samples); the paired
    #: statistics resample and permute whole clusters. Set by the task (its doc's ``cluster`` field); None: the item
    #: is its own cluster.
    cluster: str | None = None


@dataclass
class CellResult:
    """A finished cell. ``identity`` is the dict hashed into ``cell_id`` (see :mod:`snapeval.sweep.grid`)."""

    cell_id: str
    identity: dict[str, Any]
    metrics: list[MetricValue]
    samples: list[SampleRecord]
    kv_cache_bytes: int | None = None
    decode_tokens_per_s: float | None = None
    prefill_tokens_per_s: float | None = None
    prompt_tokens: int | None = None
    generated_tokens: int | None = None
    wall_s: float | None = None
    harness_config: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, Any] = field(default_factory=dict)
    data_records: dict[str, Any] = field(default_factory=dict)  # datasets the run loaded: source, sha256, rows
    finished_at: str = ""
    task_source_sha256: str | None = None  # the task's folder when it ran (snapeval.sweep.grid.task_source_sha256)
    schema: int = SCHEMA_VERSION

    # ---------------------------------------------------------------------------------------------------------------
    @property
    def deterministic(self) -> bool:
        """True when every sample was decoded greedily (so its text must reproduce exactly)."""
        return bool(self.samples) and all(s.greedy for s in self.samples)

    @property
    def has_generations(self) -> bool:
        return any(s.generations for s in self.samples)

    @property
    def generations_sha256(self) -> str | None:
        """Hash of every sample's generated text, in (subtask, doc_id) order; None for log-likelihood cells."""
        if not self.has_generations:
            return None
        payload = [[s.subtask, s.doc_id, list(s.generations)] for s in sorted(self.samples, key=_sample_key)]
        return hashlib.sha256(json.dumps(payload, ensure_ascii=True).encode()).hexdigest()

    def generations_by_doc(self) -> dict[tuple[str, int], tuple[str, ...]]:
        return {(s.subtask, s.doc_id): s.generations for s in self.samples}

    # ---------------------------------------------------------------------------------------------------------------
    def to_json(self) -> str:
        data = asdict(self)
        data["deterministic"] = self.deterministic
        data["generations_sha256"] = self.generations_sha256
        return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CellResult":
        """A cell read back from JSON, every field validated (:func:`validate_cell_dict`): a bad one is a one-line
        :class:`SnapevalError` naming the cell and the field."""
        if not isinstance(data, dict):
            raise SnapevalError(f"cell result is not a JSON object (got {type(data).__name__})")
        validate_cell_dict(data)
        try:
            data = {k: v for k, v in data.items() if k not in ("deterministic", "generations_sha256")}
            data["metrics"] = [MetricValue(**m) for m in data["metrics"]]
            data["samples"] = [SampleRecord(**{**s, "generations": tuple(s["generations"])}) for s in data["samples"]]
            return cls(**data)
        except TypeError as exc:  # an unknown or missing field
            raise SnapevalError(f"{cell_label(data)}: {exc}") from None

    @classmethod
    def from_json(cls, text: str) -> "CellResult":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SnapevalError(f"not valid JSON (truncated or edited?): {exc}") from None
        return cls.from_dict(data)


def cell_label(data: dict[str, Any]) -> str:
    """``cell <id> (<model> | <task> | <method>@<budget> | seed <s>)`` from a cell's raw JSON, as far as it reads."""
    identity = data.get("identity") if isinstance(data.get("identity"), dict) else {}
    model = (identity.get("model") or {}).get("pretrained", "?") if isinstance(identity.get("model"), dict) else "?"
    task = (identity.get("task") or {}).get("name", "?") if isinstance(identity.get("task"), dict) else "?"
    policy = identity.get("policy") if isinstance(identity.get("policy"), dict) else {}
    method = policy.get("method", "?")
    point = method if policy.get("budget") is None else f"{method}@{policy.get('budget')}"
    return f"cell {data.get('cell_id', '?')} ({model} | {task} | {point} | seed {identity.get('seed', '?')})"


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check(ok: bool, field_path: str, value: Any, allowed: str) -> None:
    if not ok:
        shown = repr(value) if not isinstance(value, float) else str(value)
        raise SnapevalError(f"{field_path}={shown[:60]} is invalid; allowed: {allowed}")


def validate_cell_dict(data: dict[str, Any]) -> None:
    """Check a cell's raw JSON before it is used: the schema version, the types of every metric and per-item record,
    finite numbers (a NaN score or stderr is an error, not "n/a"), and unique ``doc_id`` s per subtask (a duplicate
    would silently pair one item with another). Raises a one-line :class:`SnapevalError`:
    ``<cell label>: <field>=<value> is invalid; allowed: ...``."""
    label = cell_label(data)
    try:
        if data.get("schema") != SCHEMA_VERSION:
            raise SnapevalError(f"schema={data.get('schema')!r} is not supported; allowed: {SCHEMA_VERSION}")
        for key in ("cell_id", "identity", "metrics", "samples"):
            if key not in data:
                raise SnapevalError(f"field {key!r} is missing")
        _check(isinstance(data["cell_id"], str) and data["cell_id"] != "", "cell_id", data["cell_id"],
               "a non-empty string")
        _check(isinstance(data["identity"], dict), "identity", data["identity"], "a JSON object")
        _check(isinstance(data["metrics"], list), "metrics", data["metrics"], "a list")
        _check(isinstance(data["samples"], list), "samples", data["samples"], "a list")
        source = data.get("task_source_sha256")
        _check(source is None or (isinstance(source, str) and len(source) == 64), "task_source_sha256", source,
               "null or a 64-digit hex SHA-256")
        for i, m in enumerate(data["metrics"]):
            where = f"metrics[{i}]"
            _check(isinstance(m, dict), where, m, "a JSON object")
            for key in ("subtask", "metric", "filter"):
                _check(isinstance(m.get(key), str), f"{where}.{key}", m.get(key), "a string")
            for key in ("value", "stderr"):
                _check(m.get(key) is None or _finite(m.get(key)), f"{where}.{key}", m.get(key),
                       "a finite number or null")
            _check(isinstance(m.get("n"), int) and not isinstance(m.get("n"), bool) and m["n"] >= 0, f"{where}.n",
                   m.get("n"), "an integer >= 0")
            _check(isinstance(m.get("higher_is_better", True), bool), f"{where}.higher_is_better",
                   m.get("higher_is_better"), "true or false")
        seen: dict[tuple[str, int], int] = {}
        for i, sample in enumerate(data["samples"]):
            where = f"samples[{i}]"
            _check(isinstance(sample, dict), where, sample, "a JSON object")
            _check(isinstance(sample.get("subtask"), str), f"{where}.subtask", sample.get("subtask"), "a string")
            doc = sample.get("doc_id")
            _check(is_int(doc), f"{where}.doc_id", doc, "an integer")
            _check(isinstance(sample.get("target", ""), str), f"{where}.target", sample.get("target"), "a string")
            gens = sample.get("generations")
            _check(isinstance(gens, list) and all(isinstance(g, str) for g in gens), f"{where}.generations", gens,
                   "a list of strings")
            scores = sample.get("scores")
            _check(isinstance(scores, dict), f"{where}.scores", scores, "a JSON object of metric -> number")
            for key, value in scores.items():
                _check(_finite(value), f"{where}.scores[{key!r}]", value, "a finite number")
            _check(isinstance(sample.get("greedy"), bool), f"{where}.greedy", sample.get("greedy"), "true or false")
            cluster = sample.get("cluster")
            _check(cluster is None or isinstance(cluster, str), f"{where}.cluster", cluster, "a string or null")
            key = (sample["subtask"], doc)
            if key in seen:
                raise SnapevalError(f"{where}.doc_id={doc} is a duplicate of samples[{seen[key]}] in subtask "
                                    f"{sample['subtask']!r}; allowed: one record per item")
            seen[key] = i
    except SnapevalError as exc:
        raise SnapevalError(f"{label}: {exc}") from None


def group_id_of(identity: dict[str, Any]) -> str:
    """The id of a cell's group: its identity without the policy (model, task and its parameters, data, seed,
    version). Cells of one group answered the same items: they share one prefill per item and are compared pairwise."""
    rest = {k: v for k, v in identity.items() if k != "policy"}
    text = json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _sample_key(s: SampleRecord) -> tuple[str, int]:
    return (s.subtask, s.doc_id)


def _is_greedy(arguments: Any) -> bool:
    """Whether lm-eval's logged request arguments ask for greedy decoding (its default when nothing is said)."""
    for arg in arguments or ():
        if isinstance(arg, (list, tuple)) and len(arg) >= 2 and isinstance(arg[1], dict):
            kw = arg[1]
            if kw.get("do_sample"):
                temp = _number(kw.get("temperature"))
                if temp is None or temp > 0:
                    return False
            elif _number(kw.get("temperature")) not in (None, 0.0) and "do_sample" not in kw:
                return False
    return True


def _samples_of(task: str, rows: list[dict]) -> list[SampleRecord]:
    """Collapse lm-eval's per-filter sample rows (one row per doc and filter) into one record per doc."""
    by_doc: dict[int, dict[str, Any]] = {}
    for row in rows:
        doc_id = int(row["doc_id"])
        doc = row.get("doc") if isinstance(row.get("doc"), dict) else {}
        cluster = doc.get("cluster")
        rec = by_doc.setdefault(doc_id, {"target": str(row.get("target", "")), "generations": (), "scores": {},
                                         "greedy": True, "output_type": None,
                                         "cluster": None if cluster is None else str(cluster)})
        resps = row.get("resps") or []
        # one list per request instance; a task's `repeats` samples are all in it (every one is kept)
        texts = [t for r in resps if isinstance(r, (list, tuple)) for t in r if isinstance(t, str)]
        if texts and not rec["generations"]:
            rec["generations"] = tuple(texts)
        rec["greedy"] = rec["greedy"] and _is_greedy(row.get("arguments"))
        filt = row.get("filter", "none")
        for metric in row.get("metrics") or ():
            score = _number(row.get(metric))
            if score is not None:
                rec["scores"][f"{metric},{filt}"] = score
    return [SampleRecord(subtask=task, doc_id=d, target=r["target"], generations=r["generations"], scores=r["scores"],
                         greedy=r["greedy"], cluster=r["cluster"]) for d, r in sorted(by_doc.items())]


def _declared_order(out: dict[str, Any], task: str) -> dict[str, int]:
    """The position of each metric in the task's ``metric_list`` (its first is the headline)."""
    declared = ((out.get("configs") or {}).get(task) or {}).get("metric_list") or []
    return {m["metric"]: i for i, m in enumerate(declared) if isinstance(m, dict) and "metric" in m}


def metrics_of(out: dict[str, Any]) -> list[MetricValue]:
    """Every ``metric,filter`` value of every (sub)task in an lm-eval results dict, with stderr and n, in the order
    the task declares its metrics (lm-eval reports them in the order its scorer returned them)."""
    metrics = []
    higher = out.get("higher_is_better") or {}
    n_samples = out.get("n-samples") or {}
    for task, values in sorted((out.get("results") or {}).items()):
        n = n_samples.get(task, {}).get("effective")
        if n is None:
            n = values.get("sample_len", 0)
        found = []
        for key, value in values.items():
            if "," not in key or "_stderr," in key:
                continue
            metric, filt = key.split(",", 1)
            found.append(MetricValue(
                subtask=task, metric=metric, filter=filt, value=_number(value),
                stderr=_number(values.get(f"{metric}_stderr,{filt}")), n=int(n or 0),
                higher_is_better=bool(higher.get(task, {}).get(metric, True)),
            ))
        order = _declared_order(out, task)
        metrics += sorted(found, key=lambda m: order.get(m.metric, len(order)))  # stable: filters keep their order
    return metrics


def from_lm_eval(cell_id: str, identity: dict[str, Any], out: dict[str, Any], *, wall_s: float | None = None,
                 finished_at: str = "") -> CellResult:
    """Build a :class:`CellResult` from :func:`snapeval.harness.evaluate`'s return value."""
    if not isinstance(out, dict) or "results" not in out:
        raise SnapevalError(f"cell {cell_id}: the evaluation returned no lm-eval results")
    metrics = metrics_of(out)
    if not metrics:
        raise SnapevalError(f"cell {cell_id}: lm-eval reported no metrics (did the task run any sample?)")
    samples = [s for task, rows in sorted((out.get("samples") or {}).items()) for s in _samples_of(task, rows)]
    snap = out.get("snapeval") or {}

    def measured(key, kind):
        value = _number(snap.get(key))
        return None if value is None else kind(value)

    return CellResult(
        cell_id=cell_id, identity=identity, metrics=metrics, samples=samples,
        kv_cache_bytes=measured("kv_cache_bytes", int), decode_tokens_per_s=measured("decode_tokens_per_s", float),
        prefill_tokens_per_s=measured("prefill_tokens_per_s", float), prompt_tokens=measured("prompt_tokens", int),
        generated_tokens=measured("generated_tokens", int), wall_s=wall_s,
        harness_config=dict(snap.get("config") or {}),
        versions=dict(snap.get("versions") or (snap.get("config") or {}).get("versions") or {}),
        data_records=dict(snap.get("data") or {}), finished_at=finished_at,
    )
