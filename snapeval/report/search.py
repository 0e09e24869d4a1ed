"""A sequential budget search: settle each method's smallest non-inferior budget with the fewest items.

A full sweep evaluates every budget on every item, though most cells are settled, clearly fine or clearly broken,
after a fraction of them, and a deployer needs one answer per method. The search evaluates a group's items in
batches of whole clusters in a fixed random order; each batch ends a look. Each method walks its budgets from the
largest down, the report's fixed-sequence order (each budget at alpha, the family-wise error per method at most
alpha): its current budget is tested at each look and stops as soon as it is settled; non-inferior opens the next
smaller budget, not non-inferior ends the walk, and a budget unsettled when the items run out, or stopped because
non-inferiority is out of reach, is inconclusive and ends it too. Two designs (``SearchSettings.design``):
``group-sequential`` (default: a few planned looks, :func:`look_batches`, with Lan-DeMets boundaries on the fixed
rule's statistic, :mod:`snapeval.stats.groupseq`) and ``e-process`` (a look after every batch, :func:`batches`, with
the anytime-valid test of :mod:`snapeval.stats.sequential`). The full-cache reference runs each batch once; the open
cells of every method that need one batch are evaluated in one call, so the shared prefill
(:mod:`snapeval.branching`) still serves each of them.

**Monotonicity** (``monotone=True``, an assumption the user accepts, never a default): a method's accuracy does not
fall when its budget grows. It is checked, not assumed: the budgets below a settled failure are run on the failed
budget's first batch, and each is not non-inferior "by monotonicity" only where it scored no better than the failed
budget there; elsewhere it keeps no claim and :attr:`SearchResult.warnings` says so. A walk from the largest budget
never leaves a budget above a settled success unsettled. A bisection over the budgets would run fewer cells, but it
tests several budgets that may all be truly not non-inferior, each at alpha, and so loses the walk's error bound: it
is not offered.

:func:`search` is the engine (the caller says how a batch is evaluated); :func:`replay` runs it over the per-item
results a full sweep already wrote (no model: what the search would have evaluated and decided; the time saved is
estimated from each group's measured seconds in proportion to its item-evaluations); ``snapeval report DIR
--search-replay`` writes it as ``search.md``. The live search, run by ``snapeval sweep --until-decided``, is
:mod:`snapeval.sweep.search`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from snapeval.errors import SnapevalError
from snapeval.stats.decision import DecisionRule
from snapeval.stats.groupseq import FUTILITY, LOOKS, decide_look, design_text, items_for_reach, look_shares
from snapeval.stats.sequential import INCONCLUSIVE, NON_INFERIOR, NOT_NON_INFERIOR, OPEN, decide

#: The search's designs: planned looks with alpha spending (default), or a look after every batch (e-process).
GROUP_SEQUENTIAL, E_PROCESS = "group-sequential", "e-process"
DESIGNS = (GROUP_SEQUENTIAL, E_PROCESS)

#: How a cell's label was reached.
TESTED, IMPLIED = "tested", "by monotonicity"
#: A budget below the end of its method's walk: not run, no claim (the fixed-sequence walk never tests it).
NOT_REACHED = "not reached"


@dataclass(frozen=True)
class SearchSettings:
    """``design``: ``group-sequential`` (default: ``looks`` planned looks, :data:`~snapeval.stats.groupseq.LOOKS`
    equal ones or the shares given (:func:`snapeval.stats.groupseq.look_shares`), whole clusters, Lan-DeMets
    boundaries on the fixed rule's statistic, the non-inferior side spending with
    :data:`~snapeval.stats.groupseq.DESIGN_SPENDING`, only at looks where a tied run could reach it (re-planned to stop
    a tied run by :data:`~snapeval.stats.groupseq.TIED_STOP_SHARE` of the items where that keeps a canonical power
    ratio of :data:`~snapeval.stats.groupseq.TIED_STOP_RATIO`: :func:`snapeval.stats.groupseq.plan_bounds`), the other
    side with :data:`~snapeval.stats.groupseq.OTHER_SPENDING`, and a non-binding futility rule at conditional power
    ``futility``; :func:`snapeval.stats.groupseq.design_text` words it for ``search.md``) or ``e-process`` (a look
    after every batch of ``batch`` items, the anytime-valid test of :mod:`snapeval.stats.sequential`); ``seed``: the
    seed of the fixed random order of clusters; ``monotone``: the user accepts that accuracy does not fall as a
    method's budget grows (budgets below a settled failure are not run in full: each is run on the first look's items
    and labelled not non-inferior only when those agree, else the report warns). ``run_ahead`` (the live search
    alone; decisions never depend on it): each look also runs, from the same prefill of each item, every budget below
    each open method's current one, so a budget the walk opens later reads its earlier looks instead of prefilling
    their items again (the full grid's economy: one prefill per item, every configuration a branch of it); off, a look
    runs only the budgets the walk tests, for a task whose items cost mostly decoding."""

    batch: int = 8
    seed: int = 0
    monotone: bool = False
    design: str = "group-sequential"
    looks: int | tuple[float, ...] = LOOKS
    futility: float = FUTILITY
    run_ahead: bool = True

    def __post_init__(self):
        if self.design not in DESIGNS:
            raise SnapevalError(f"search.design={self.design!r} is invalid; allowed: {', '.join(DESIGNS)}")
        try:
            look_shares(self.looks)
        except SnapevalError:
            raise SnapevalError(f"search.looks={self.looks!r} is invalid; allowed: an integer in 1..10 (equal looks) "
                                "or up to 10 increasing shares in (0, 1], the last 1, e.g. 5 or (0.3, 0.6, 0.8, 1.0)"
                                ) from None
        if not (isinstance(self.futility, (int, float)) and not isinstance(self.futility, bool)
                and 0 <= self.futility < 0.5):
            raise SnapevalError(f"search.futility={self.futility!r} is invalid; allowed: a number in [0, 0.5), e.g. "
                                f"{FUTILITY}")
        if not (isinstance(self.batch, int) and not isinstance(self.batch, bool) and self.batch >= 1):
            raise SnapevalError(f"search.batch={self.batch!r} is invalid; allowed: an integer >= 1, e.g. 8")
        if not (isinstance(self.seed, int) and not isinstance(self.seed, bool) and self.seed >= 0):
            raise SnapevalError(f"search.seed={self.seed!r} is invalid; allowed: an integer >= 0")
        if not isinstance(self.monotone, bool):
            raise SnapevalError(f"search.monotone={self.monotone!r} is invalid; allowed: true or false")
        if not isinstance(self.run_ahead, bool):
            raise SnapevalError(f"search.run_ahead={self.run_ahead!r} is invalid; allowed: true or false")


def batches(clusters: Mapping[Any, list], batch: int, seed: int) -> list[list]:
    """The items of ``clusters`` (``{cluster: [item, ...]}``) in batches: clusters in a fixed random order (a
    permutation of their sorted keys drawn with ``seed``), whole clusters added until a batch holds at least ``batch``
    items."""
    keys = sorted(clusters, key=repr)
    order = np.random.default_rng(seed).permutation(len(keys))
    out, current = [], []
    for i in order:
        current += [(keys[i], item) for item in clusters[keys[i]]]
        if len(current) >= batch:
            out.append(current)
            current = []
    if current:
        out.append(current)
    return out


def look_batches(clusters: Mapping[Any, list], looks, seed: int) -> list[list]:
    """The items of ``clusters`` in batches for the group-sequential design's ``looks`` (equal looks or their shares:
    :func:`snapeval.stats.groupseq.look_shares`): clusters in the fixed random order of :func:`batches`, batch ``k``
    closed at the first whole cluster that brings the items to the ``k``-th share of them (fewer batches when clusters
    are too large for that many)."""
    keys = sorted(clusters, key=repr)
    order = np.random.default_rng(seed).permutation(len(keys))
    total = sum(len(v) for v in clusters.values())
    targets = [math.ceil(share * total - 1e-9) for share in look_shares(looks)]
    out, current, seen, k = [], [], 0, 0
    for i in order:
        current += [(keys[i], item) for item in clusters[keys[i]]]
        seen += len(clusters[keys[i]])
        if seen >= targets[k]:
            out.append(current)
            current = []
            while k < len(targets) - 1 and seen >= targets[k]:
                k += 1
    if current:
        out.append(current)
    return out


def look_fractions(plan: list[list]) -> list[float]:
    """The information fractions of a plan's looks: items up to each batch over all items, rounded to 0.01 (the
    boundaries are computed once per distinct set), the last exactly 1."""
    sizes = np.cumsum([len(b) for b in plan])
    out = [round(float(x) / float(sizes[-1]), 2) for x in sizes]
    out[-1] = 1.0
    for i in range(len(out) - 2, -1, -1):  # strictly increasing after rounding
        out[i] = min(out[i], round(out[i + 1] - 0.01, 2))
    return out


def reach(items: int, layout_sizes, rule: DecisionRule, settings: "SearchSettings") -> tuple[bool, int]:
    """Plan-time reachability of non-inferiority for a cell of ``items`` items in clusters of ``layout_sizes``
    (None: independent items): ``(reachable, items needed)``, where reachable means the design's last boundary can be
    met when every item ties (no change), and the items needed are the fewest at which it can (under the same design
    effect). The e-process design reports the fixed grid's reach (its own needs more)."""
    from snapeval.stats.binary import worst_case_design_effect

    deff = worst_case_design_effect(layout_sizes) if layout_sizes is not None else 1.0
    looks = settings.looks if settings.design == GROUP_SEQUENTIAL else 1
    if rule.margin <= 0:
        return False, 0
    needed = items_for_reach(rule.margin, rule.alpha, deff, looks)
    return items >= needed, needed


@dataclass
class CellOutcome:
    """One (method, budget) cell of a search: its label, how it was settled, and what it used."""

    method: str
    budget: int
    label: str = OPEN
    how: str = TESTED
    items: int = 0  # items evaluated
    clusters: int = 0
    batches: int = 0
    log_e_ni: float = 0.0
    log_e_not: float = 0.0
    why: str = ""  # an inconclusive cell stopped before its last look: "futility" or "out of reach"
    statistic: float | None = None  # group-sequential: Tango's statistic at -margin at the last look, and its bound
    bound: float | None = None


@dataclass
class SearchResult:
    """A group's search: every cell's outcome, the reference's items, and the item-evaluations against the full
    grid's."""

    cells: dict[tuple[str, int], CellOutcome]
    reference_items: int
    total_items: int
    batches: int
    monotone: bool
    design: str = E_PROCESS
    warnings: list[str] = field(default_factory=list)  # the monotonicity check's findings

    @property
    def stopped_early(self) -> int:
        """Cells the walk ran that stopped (settled, or for futility) before their last batch."""
        return sum(c.how == TESTED and 0 < c.batches < self.batches for c in self.cells.values())

    @property
    def cells_run(self) -> int:
        """Cells the walk ran (tested), as opposed to not reached or labelled by monotonicity."""
        return sum(c.how == TESTED and c.items > 0 for c in self.cells.values())

    @property
    def evaluations(self) -> int:
        """Item-evaluations the search ran: the reference's and every cell's."""
        return self.reference_items + sum(c.items for c in self.cells.values())

    @property
    def full_grid_evaluations(self) -> int:
        return self.total_items * (1 + len(self.cells))

    def method_decisions(self) -> dict[str, tuple[str, int | None]]:
        """``{method: (answer, smallest non-inferior budget)}``: the smallest budget its walk settled non-inferior,
        else the label of its largest budget (not non-inferior or inconclusive)."""
        out = {}
        for method in dict.fromkeys(m for m, _ in self.cells):
            budgets = sorted((b for m, b in self.cells if m == method), reverse=True)
            smallest = None
            for b in budgets:
                if self.cells[(method, b)].label != NON_INFERIOR:
                    break
                smallest = b
            out[method] = (NON_INFERIOR, smallest) if smallest is not None else (
                self.cells[(method, budgets[0])].label, None)
        return out


#: ``evaluate(batch_items, cells) -> {cell: {item: score}}``: the per-item headline scores on one batch's items of
#: each of ``cells``, a list of ``(method, budget)`` and ``None`` for the full-cache reference (asked for once per
#: batch); the cells of one call share each item's prefill.
EvaluateBatch = Callable[[list, list], Mapping[Any, Mapping[Any, float]]]


def search(clusters: Mapping[Any, list], cells: list[tuple[str, int]], evaluate: EvaluateBatch, *,
           rule: DecisionRule = DecisionRule(), settings: SearchSettings = SearchSettings(),
           higher_is_better: bool = True, max_size: int | None = None, plan: list[list] | None = None) -> SearchResult:
    """:func:`steps` driven by ``evaluate`` (see there)."""
    walk = steps(clusters, cells, rule=rule, settings=settings, higher_is_better=higher_is_better, max_size=max_size,
                 plan=plan)
    request = next(walk)
    while True:
        try:
            request = walk.send(evaluate(*request))
        except StopIteration as done:
            return done.value


def steps(clusters: Mapping[Any, list], cells: list[tuple[str, int]], *, rule: DecisionRule = DecisionRule(),
          settings: SearchSettings = SearchSettings(), higher_is_better: bool = True, max_size: int | None = None,
          plan: list[list] | None = None):
    """The search over one group's items (``clusters``: ``{cluster: [item, ...]}``, the task's whole layout) for the
    compressed ``cells`` (``(method, budget)``), as a generator: it yields ``(batch items, cells)`` requests (see
    :data:`EvaluateBatch`), is sent their scores, and returns the :class:`SearchResult`. ``max_size``: the largest
    cluster of the task's layout (default: the largest in ``clusters``); ``plan``: the batches, lists of ``(cluster,
    item)`` (default: :func:`look_batches` for the group-sequential design, :func:`batches` for the e-process; a
    cluster must not span two). Per-item scores must lie in [0, 1].

    Each method walks its budgets from the largest down (the report's fixed-sequence order, each at alpha): its
    current budget runs batch after batch until it is settled; a non-inferior budget opens the next smaller one (from
    the first batch); a not non-inferior one ends the walk, as does one still unsettled when the items run out
    (inconclusive) or stopped for futility (group-sequential). A batch is a look. Budgets the walk does not reach are
    :data:`NOT_REACHED`; under ``settings.monotone``, the budgets below a settled failure are run on the first batch
    and labelled not non-inferior by monotonicity only where none scored better than the failed budget there (else a
    warning in :attr:`SearchResult.warnings` and no claim). The open cells of every method that need the same batch
    are evaluated in one call."""
    if not cells:
        raise SnapevalError("search: no compressed (method, budget) cell to decide")
    if len(set(cells)) != len(cells):
        raise SnapevalError("search: a (method, budget) cell is listed twice")
    grouped = settings.design == GROUP_SEQUENTIAL
    if plan is None:
        plan = look_batches(clusters, settings.looks, settings.seed) if grouped else batches(clusters, settings.batch,
                                                                                             settings.seed)
    fractions = look_fractions(plan)
    total = sum(len(v) for v in clusters.values())
    layout = [len(v) for v in clusters.values()]
    top = max_size or max(layout)
    outcome = {c: CellOutcome(*c, label=NOT_REACHED, how="") for c in cells}
    walks = {m: sorted((b for mm, b in cells if mm == m), reverse=True) for m in dict.fromkeys(m for m, _ in cells)}
    current = {m: budgets[0] for m, budgets in walks.items()}  # the budget each method is testing (None: done)
    for m, b in current.items():
        outcome[(m, b)].label, outcome[(m, b)].how = OPEN, TESTED
    # per cell, per cluster in order: (summed oriented difference, items, worse items, better items)
    data: dict[tuple[str, int], list[tuple[float, int, int, int]]] = {c: [] for c in cells}
    looks_at: dict[tuple[str, int], list[int]] = {c: [] for c in cells}
    first: dict[tuple[str, int], dict[Any, float]] = {}  # each cell's oriented scores on the first batch
    binary: dict[tuple[str, int], bool] = {c: True for c in cells}
    reference: dict[Any, float] = {}
    sign = 1.0 if higher_is_better else -1.0
    warnings: list[str] = []
    checks: list[tuple[str, int]] = []  # (method, failed budget): skipped budgets to check on the first batch
    while True:
        testing = [(m, b) for m, b in current.items() if b is not None]
        if not testing and not checks:
            break
        if testing:
            index = min(outcome[c].batches for c in testing)
            group = [c for c in testing if outcome[c].batches == index]
        else:
            index, group = 0, []
        check_cells = [(m, b) for m, failed in checks for b in walks[m] if b < failed] if not testing else []
        batch = plan[index]
        items = [item for _, item in batch]
        need_reference = items[0] not in reference
        scores = yield items, ([None] if need_reference else []) + group + check_cells
        if need_reference:
            reference.update({item: _bounded(scores[None][item], "the full cache") for item in items})
        if check_cells:
            for m, failed in checks:
                warnings += _monotone_check(m, failed, [b for b in walks[m] if b < failed], batch, scores, first,
                                            reference, sign, rule, outcome)
            checks = []
            continue
        last = index == len(plan) - 1
        for c in group:
            per: dict[Any, list] = {}
            for cluster, item in batch:
                value = _bounded(scores[c][item], f"{c[0]}@{c[1]}")
                diff = sign * (value - reference[item])
                binary[c] = binary[c] and value in (0.0, 1.0) and reference[item] in (0.0, 1.0)
                row = per.setdefault(cluster, [0.0, 0, 0, 0])
                row[0] += diff
                row[1] += 1
                row[2] += diff < 0
                row[3] += diff > 0
                if index == 0:
                    first.setdefault(c, {})[item] = sign * value
            data[c] += [tuple(r) for r in per.values()]
            looks_at[c].append(len(data[c]))
            out = outcome[c]
            out.items += len(batch)
            out.clusters, out.batches = len(data[c]), len(looks_at[c])
            diffs = [r[0] for r in data[c]]
            counts = [r[1] for r in data[c]]
            if grouped and binary[c]:
                got = decide_look(sum(r[2] for r in data[c]), sum(r[3] for r in data[c]), counts, index, fractions,
                                  rule.margin, rule.alpha, layout_sizes=layout, futility=settings.futility,
                                  total_items=total)
                out.label, out.why, out.statistic, out.bound = got.label, got.why, got.statistic, got.bound
            else:  # the e-process (any scores in [0, 1]), looked at after each batch
                got = decide(diffs, counts, rule.margin, rule.alpha, looks_at[c], max_size=top, exhausted=last)
                out.label, out.log_e_ni, out.log_e_not = got.label, got.log_e_ni, got.log_e_not
            if out.label == OPEN:
                continue
            method, budget = c
            below = [b for b in walks[method] if b < budget]
            if out.label == NON_INFERIOR and below:
                current[method] = below[0]
                outcome[(method, below[0])].label, outcome[(method, below[0])].how = OPEN, TESTED
                continue
            current[method] = None
            if out.label == NOT_NON_INFERIOR and settings.monotone and below:
                checks.append((method, budget))
    return SearchResult(outcome, len(reference), total, len(plan), settings.monotone, settings.design, warnings)


def _monotone_check(method: str, failed: int, below: list[int], batch: list, scores, first, reference, sign: float,
                    rule: DecisionRule, outcome) -> list[str]:
    """``--monotone`` checked on the first batch: each budget below a settled failure is evaluated on the failed
    budget's first-batch items; it is labelled not non-inferior by monotonicity only when it scored no better than
    the failed budget on those items (summed); otherwise it keeps no claim and a warning names it, with the one-sided
    paired test (sign-flip over clusters, mid-p) of "it is better than the failed budget"."""
    from snapeval.stats.permutation import sign_flip_test

    lines = []
    failed_scores = first.get((method, failed), {})
    for b in below:
        per: dict[Any, float] = {}
        for cluster, item in batch:
            value = _bounded(scores[(method, b)][item], f"{method}@{b}")
            per[cluster] = per.get(cluster, 0.0) + sign * value - failed_scores.get(item, sign * value)
        out = outcome[(method, b)]
        out.items, out.clusters, out.batches = len(batch), len(per), 1
        gain = float(sum(per.values()))
        if gain <= 0:
            out.label, out.how = NOT_NON_INFERIOR, IMPLIED
            continue
        p, _ = sign_flip_test(list(per.values()), alternative="greater")
        out.label, out.how = NOT_REACHED, "monotonicity contradicted"
        lines.append(f"{method}: not monotone at the first look: budget {b} scored {gain:+g} (summed over "
                     f"{len(batch)} items) against the failed budget {failed} on the same items (one-sided paired "
                     f"p = {p:.3g}{'' if p < rule.alpha else ', not significant at this n'}); no claim below "
                     f"{failed} by monotonicity")
    return lines


def _bounded(value, who: str) -> float:
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise SnapevalError(f"search: a per-item score {value!r} of {who} is outside [0, 1]; the anytime-valid test "
                            "needs bounded scores")
    return value


# --------------------------------------------------------------------------------------------------------------------
# replaying a finished sweep


@dataclass
class GroupReplay:
    """One (model, task, seed) group searched: the search's result and, for a live search, the seconds it measured."""

    model: str
    task: str
    seed: Any
    result: SearchResult
    spent_seconds: float | None = None  # a live search's measured seconds (None: replayed, nothing ran)
    reach: tuple[bool, int] | None = None  # plan-time: non-inferiority reachable at all, and the items it needs
    cell_ids: dict[tuple[str, int], str] | None = None  # a live search: each (method, budget)'s cell
    ahead_evaluations: int | None = None  # a live search: item-evaluations run ahead that the walk never read

    def cell_lines(self) -> dict[str, str]:
        """A live search's line per cell id: its label, how and after how many items (the sweep's summary rows)."""
        out = {}
        for key, cell_id in (self.cell_ids or {}).items():
            c = self.result.cells[key]
            how = "" if c.how in ("", TESTED) else f" {c.how}"
            out[cell_id] = f"{c.label}{how} after {c.items} of {self.result.total_items} items"
        return out


def replay(results_dir, *, rule: DecisionRule | None = None,
           settings: SearchSettings = SearchSettings()) -> list[GroupReplay]:
    """The search over a finished sweep's own per-item results: per (model, task, seed) group with a full-cache cell,
    its compressed cells with a budget, on the headline metric, items in the group's clusters. No model runs: each
    batch's scores are read from the cells, so the decisions are the search's on the same items the grid ran."""
    from snapeval.cache.methods import METHOD_TABLE
    from snapeval.report.results_table import sweep_decision
    from snapeval.results.store import ResultsStore
    from snapeval.stats.headline import headline_metric

    store = ResultsStore(results_dir)
    manifest = store.read_manifest()
    rule = rule if rule is not None else sweep_decision(results_dir)
    results = {r.cell_id: r for r in store.finished()}
    groups: dict[tuple, list[dict]] = {}
    for view in manifest["cells"]:
        if view["cell_id"] in results:
            groups.setdefault((view["model"], view["task"], view.get("seed")), []).append(view)
    out = []
    for (model, task, seed), views in groups.items():
        reference = next((v for v in views if METHOD_TABLE.is_reference(v.get("method"))), None)
        compressed = [v for v in views if not METHOD_TABLE.is_reference(v.get("method")) and v.get("budget") is not None]
        if reference is None or not compressed:
            continue
        ref_result = results[reference["cell_id"]]
        subtask, metric = headline_metric(reference, ref_result)
        higher = next(m.higher_is_better for m in ref_result.metrics if (m.subtask, m.key) == (subtask, metric))

        def per_item(result):
            return {(s.subtask, s.doc_id): s.scores[metric] for s in result.samples
                    if s.subtask == subtask and metric in s.scores}

        ref_scores = per_item(ref_result)
        clusters: dict[Any, list] = {}
        for s in ref_result.samples:
            if (s.subtask, s.doc_id) in ref_scores:
                clusters.setdefault(s.cluster if s.cluster is not None else (s.subtask, s.doc_id), []).append(
                    (s.subtask, s.doc_id))
        scores = {(v["method"], int(v["budget"])): per_item(results[v["cell_id"]]) for v in compressed}
        for key, mine in scores.items():
            if set(mine) != set(ref_scores):
                raise SnapevalError(f"replay: {model} / {task}: {key[0]}@{key[1]} scored other items than the full "
                                    "cache; a replay needs the same items")

        def evaluate(items, wanted, scores=scores, ref_scores=ref_scores):
            return {c: {i: (ref_scores if c is None else scores[c])[i] for i in items} for c in wanted}

        result = search(clusters, list(scores), evaluate, rule=rule, settings=settings, higher_is_better=higher)
        sizes = [len(v) for v in clusters.values()]
        out.append(GroupReplay(model, task, seed, result, reach=reach(sum(sizes), sizes, rule, settings)))
    if not out:
        raise SnapevalError(f"replay: {results_dir} has no group with a full-cache cell and a compressed cell")
    return out


def render(replays: list[GroupReplay], rule: DecisionRule, settings: SearchSettings) -> list[str]:
    """Markdown: per group the method answers, the items each cell used and how it was settled, and the
    item-evaluations and time against the full grid."""
    if settings.design == GROUP_SEQUENTIAL:
        how = design_text(settings.looks, settings.futility)
    else:
        how = f"anytime-valid e-process, a look after every batch of {settings.batch} items"
    lines = [f"Sequential budget search (margin δ = {rule.margin:g}, α = {rule.alpha:g} per side; {how}; clusters in "
             f"a fixed random order, seed {settings.seed}; monotonicity "
             f"{'assumed, checked on the first look' if settings.monotone else 'not assumed'}).", ""]
    used = full = reference = items = early = run = 0
    spent: float | None = 0.0
    for g in replays:
        r = g.result
        used += r.evaluations
        full += r.full_grid_evaluations
        reference += r.reference_items
        items += r.total_items
        spent = None if spent is None or g.spent_seconds is None else spent + g.spent_seconds
        early += r.stopped_early
        run += r.cells_run
        answers = ", ".join(f"{m} {label}" + (f" at {b}" if b is not None else "")
                            for m, (label, b) in r.method_decisions().items())
        lines += [f"### {g.model} / {g.task} (seed {g.seed})", "", f"Answers: {answers}.", ""]
        if g.reach is not None and not g.reach[0]:
            lines += [f"Non-inferiority at δ = {rule.margin:g} is out of reach at {r.total_items} items even if every "
                      f"item tied (this design needs at least {g.reach[1]}): each cell can only be shown not "
                      "non-inferior, and stops once that is out of reach too.", ""]
        lines += ["| method | budget | label | settled | items used |", "| --- | --- | --- | --- | --- |"]
        for (method, budget), c in sorted(r.cells.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
            settled = c.why or (f"look {c.batches} of {r.batches}" if c.how == TESTED else c.how)
            how = {INCONCLUSIVE: c.why or "items ran out", NOT_REACHED: c.how or "not run"}.get(c.label, settled)
            lines.append(f"| {method} | {budget} | {c.label} | {how} | {c.items} of {r.total_items} |")
        lines += [""] + [f"Warning: {w}" for w in r.warnings] if r.warnings else []
        lines += ["", f"Cells stopped early: {r.stopped_early} of the {r.cells_run} the walk ran. "
                      f"Item-evaluations: {r.evaluations} of the full grid's {r.full_grid_evaluations} "
                      f"({r.evaluations / r.full_grid_evaluations:.0%}); the full cache ran {r.reference_items} of "
                      f"{r.total_items} items" + (f"; measured {g.spent_seconds:.0f} s" if g.spent_seconds is not None
                                                   else "") + "."
                  + (f" Run ahead of the walk from the same prefills and never read: {g.ahead_evaluations} "
                     "item-evaluations." if g.ahead_evaluations else ""), ""]
    share = used / full if full else math.nan
    lines += [f"All groups: {early} of the {run} cells run stopped early; {used} of {full} item-evaluations "
              f"({share:.0%}); the full cache ran {reference} of "
              f"{items} items" + (" (each item any cell needs is prefilled once for all of them)" if settings.run_ahead
                                  else " (an item is prefilled again for each budget opened after its look ran)")
              + (f"; measured {spent:.0f} s." if spent is not None else
                 ". A replay runs nothing: time is not estimated from it (a shared prefill and a unit's fixed costs "
                 "do not scale with item-evaluations).")]
    return lines


# --------------------------------------------------------------------------------------------------------------------
# a live search (`snapeval sweep CONFIG --until-decided`)
