"""Did the run train? Consecutive checkpoints compared, streaming, with findings (TS0xx).

Thresholds (module constants, documented in ``docs/trainstate.md``):

* **frozen** (TS001): a floating-point parameter whose bytes are identical in every checkpoint,
  or from step N to the last over at least ``MIN_FROZEN_INTERVALS`` intervals after moving
  before, while at least ``MOVING_SHARE`` of the run's other parameters changed in each of
  those intervals;
  buffers that are constant by design (``BUFFER_NAMES``: running statistics, rotary
  ``inv_freq``, ``position_ids``, causal-mask ``attn.bias`` …) and optimizer state are skipped;
* **no progress** (TS006): no parameter changed between two checkpoints of different steps;
* **update outlier** (TS007): with at least three intervals, a parameter whose relative update
  ``||Δ|| / ||θ||`` in one interval is ``OUTLIER_FACTOR`` times its own median over the others
  and at least ``OUTLIER_FLOOR``;
* **optimizer** (TS002/TS003): Adam-style ``state.N.step`` counters that go down; ``exp_avg_sq``
  whose norm falls to zero (or by ``COLLAPSE_FACTOR``) between checkpoints;
* **learning rate** (TS004/TS005): a ``param_groups.N.lr`` of 0 after the first checkpoint; a
  scheduler ``last_epoch`` that stops or goes back while the optimizer step advances.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.codes.trainstate import CODES
from ckptrescue.datasets.trainstate.metrics import PairStats, SignStats, median
from ckptrescue.datasets.trainstate.values import CheckpointValues, open_checkpoint
from ckptrescue.model import Finding, JsonObject

MOVING_SHARE = 0.5
MIN_FROZEN_INTERVALS = 2  # a layer that stops changing mid-run: this many identical intervals
OUTLIER_FACTOR = 10.0
OUTLIER_FLOOR = 0.05
COLLAPSE_FACTOR = 1e-6
CHUNK_BYTES = 64 * 1024 * 1024  # budget across all checkpoints' aligned chunks of one tensor
BUFFER_NAMES = re.compile(
    r"(running_mean|running_var|num_batches_tracked|inv_freq|position_ids|masked_bias|"
    r"(^|\.)attn\.bias|_extra_state|(^|\.)rng|rng_state|random_state)", re.IGNORECASE)
OPTIMIZER = re.compile(r"(^|\.)(optimizer|optimizer_states|optim|opt_state)(\.|$)|"
                       r"(^|\.)state\.\d+\.(exp_avg|exp_avg_sq|step|momentum_buffer|"
                       r"max_exp_avg_sq)$", re.IGNORECASE)
ADAM_STEP = re.compile(r"^(?P<opt>.*?)\.?state\.(?P<idx>\d+)\.step$")
SECOND_MOMENT = re.compile(r"\.exp_avg_sq$")
LR = re.compile(r"param_groups\.(\d+)\.lr$")
SCHED_EPOCH = re.compile(r"sched\w*(\.\d+)?\.last_epoch$", re.IGNORECASE)


@dataclass
class TensorTrend:
    name: str
    intervals: list[dict[str, Any]] = field(default_factory=list)
    sign_agreement: list[float | None] = field(default_factory=list)
    norms: list[float] = field(default_factory=list)  # ||θ|| at each checkpoint

    @property
    def frozen(self) -> bool:
        return bool(self.intervals) and all(i["identical"] for i in self.intervals)

    def to_json(self) -> JsonObject:
        return {"name": self.name, "intervals": self.intervals,
                "sign_agreement": self.sign_agreement, "norms": self.norms,
                "frozen": self.frozen}


@dataclass
class TrainStateResult:
    checkpoints: list[dict[str, Any]]
    tensors: list[TensorTrend]
    scalars: dict[str, list[float | None]]
    findings: list[Finding]
    skipped: dict[str, str]

    def to_json(self) -> JsonObject:
        return {"checkpoints": self.checkpoints,
                "tensors": [t.to_json() for t in self.tensors],
                "scalars": self.scalars, "skipped": self.skipped,
                "findings": [f.to_json() for f in self.findings]}


def finding(code: str, title: str, *, evidence: str | None, tensors: list[str] | None = None,
            details: JsonObject | None = None) -> Finding:
    return Finding(code=code, severity=CODES[code][0], title=title, evidence=evidence,
                   source="trainstate", tensors=tuple(tensors or ()), details=details or {})


def run_checkpoints(run_dir: Path) -> list[tuple[Any, Path]]:
    """The run's checkpoints in training order (step in the name, else modification time)."""
    from ckptrescue.checkpoints.probes.checkpoints import discover
    from ckptrescue.checkpoints.rank import step_of

    found = [(fmt, root) for fmt, root in discover([Path(run_dir)]) if fmt is not None]

    def key(item: tuple[Any, Path]) -> tuple[int, float, str]:
        root = item[1]
        step = step_of(root.name)
        try:
            mtime = root.stat().st_mtime
        except OSError:
            mtime = 0.0
        return (step if step is not None else -1, mtime, str(root))

    return sorted(found, key=key)


def analyse(checkpoints: list[tuple[Any, Path]], *,
            progress: Callable[..., None] | None = None) -> TrainStateResult:
    """Compare ``checkpoints`` (``(format, root)`` in training order) and judge them."""
    from ckptrescue.errors import UsageError

    if len(checkpoints) < 2:
        raise UsageError(f"training-state analysis needs at least two checkpoints of one run "
                         f"(found {len(checkpoints)})")
    views = [open_checkpoint(fmt, root) for fmt, root in checkpoints]
    names, skipped = _common_tensors(views)
    trends = [_trend(name, views) for name in names]
    if progress is not None:
        progress(len(trends), len(trends))
    scalars = _scalar_series(views)
    findings = (_frozen(trends, views) + _no_progress(trends, views) + _outliers(trends, views)
                + _optimizer(views, scalars, trends) + _learning_rate(views, scalars))
    if skipped:
        findings.append(finding(
            "TS008", f"{len(skipped)} tensor(s) not comparable across the checkpoints "
            "(missing in some, shape or dtype changed, or bytes not verified): "
            + ", ".join(sorted(skipped)[:8]) + (" …" if len(skipped) > 8 else ""),
            evidence=views[-1].path, tensors=sorted(skipped)[:200],
            details={"skipped": dict(sorted(skipped.items())[:200])}))
    return TrainStateResult(
        checkpoints=[{"path": v.path, "step": v.step, "format": v.report.format,
                      "verdict": str(v.report.verdict)} for v in views],
        tensors=trends, scalars=scalars, findings=findings, skipped=skipped)


def _common_tensors(views: list[CheckpointValues]) -> tuple[list[str], dict[str, str]]:
    first = views[0].tensors
    names: list[str] = []
    skipped: dict[str, str] = {}
    every = set().union(*(v.tensors.keys() for v in views))
    for name in sorted(every):
        recs = [v.tensors.get(name) for v in views]
        if any(r is None for r in recs):
            skipped[name] = "not a verified tensor in every checkpoint"
        elif len({(r.dtype, tuple(r.shape or ())) for r in recs if r is not None}) > 1:
            skipped[name] = "shape or dtype changes between checkpoints"
        elif views[0].numel(name) > 1 and name in first:
            names.append(name)
    return names, skipped


def _trend(name: str, views: list[CheckpointValues]) -> TensorTrend:
    import numpy as np

    n = len(views)
    itemsize = 8
    chunk = max(4096, min(1 << 20, CHUNK_BYTES // (itemsize * n)))
    pairs = [PairStats() for _ in range(n - 1)]
    signs = [SignStats() for _ in range(max(0, n - 2))]
    sq = [0.0] * n
    streams = [v.chunks(name, chunk) for v in views]
    for parts in zip(*streams, strict=True):
        values = [p[0] for p in parts]
        raws = [p[1] for p in parts]
        for i, v in enumerate(values):
            finite = v[np.isfinite(v)]
            sq[i] += float(np.dot(finite, finite))
        for i in range(n - 1):
            pairs[i].add(values[i], values[i + 1], same_bytes=raws[i] == raws[i + 1])
        for i in range(n - 2):
            signs[i].add(values[i], values[i + 1], values[i + 2])
    trend = TensorTrend(name, norms=[math.sqrt(s) for s in sq])
    for i, p in enumerate(pairs):
        trend.intervals.append({"from": views[i].step, "to": views[i + 1].step, **p.to_json()})
    trend.sign_agreement = [s.agreement for s in signs]
    return trend


def _is_parameter(name: str) -> bool:
    return not OPTIMIZER.search(name) and not BUFFER_NAMES.search(name)


def _frozen_since(t: TensorTrend) -> int | None:
    """The first interval from which ``t`` stays bit-identical to the end, else None."""
    k = len(t.intervals)
    while k > 0 and t.intervals[k - 1]["identical"]:
        k -= 1
    return k if k < len(t.intervals) else None


def _frozen(trends: list[TensorTrend], views: list[CheckpointValues]) -> list[Finding]:
    """Parameters bit-identical from some checkpoint to the last — in every checkpoint, or
    from step N on when at least ``MIN_FROZEN_INTERVALS`` intervals stay identical — while at
    least ``MOVING_SHARE`` of the others changed in each of those intervals."""
    params = [t for t in trends if _is_parameter(t.name)]
    if len(params) < 2:
        return []
    by_start: dict[int, list[str]] = {}
    for t in params:
        since = _frozen_since(t)
        if since is None:
            continue
        span = len(t.intervals) - since
        if since > 0 and span < MIN_FROZEN_INTERVALS:
            continue  # one quiet interval late in a run is not a frozen layer
        moving_everywhere = all(
            sum(1 for o in params if o is not t and not o.intervals[k]["identical"])
            >= MOVING_SHARE * (len(params) - 1) for k in range(since, len(t.intervals)))
        if moving_everywhere:
            by_start.setdefault(since, []).append(t.name)
    out = []
    for since, names in sorted(by_start.items()):
        first = views[since]
        when = (f"in all {len(views)} checkpoints (steps {views[0].step}…{views[-1].step})"
                if since == 0 else f"from step {first.step} ({Path(first.path).name}) to the "
                f"last checkpoint (step {views[-1].step}), after moving before")
        out.append(finding(
            "TS001", f"{len(names)} parameter(s) bit-identical {when} while the others changed: "
            + ", ".join(names[:8]) + (" …" if len(names) > 8 else "")
            + ". Check requires_grad, the optimizer's param groups and any freezing schedule"
            + ("" if since == 0 else f" around step {first.step}") + ".",
            evidence=views[-1].path, tensors=names[:500],
            details={"frozen": names[:500], "since_step": first.step,
                     "since_checkpoint": first.path,
                     "checkpoints": [v.path for v in views]}))
    return out


def _no_progress(trends: list[TensorTrend], views: list[CheckpointValues]) -> list[Finding]:
    params = [t for t in trends if _is_parameter(t.name)]
    out: list[Finding] = []
    if not params:
        return out
    for k in range(len(views) - 1):
        a, b = views[k], views[k + 1]
        if a.step is not None and b.step is not None and a.step == b.step:
            continue
        if all(t.intervals[k]["identical"] for t in params):
            out.append(finding(
                "TS006", f"no parameter changed between {Path(a.path).name} (step {a.step}) "
                f"and {Path(b.path).name} (step {b.step}): the run did not train in between, or "
                "the same weights were saved under a new name. Check the learning rate, that "
                "optimizer.step() ran, and the saving code.", evidence=b.path,
                details={"from": a.path, "to": b.path}))
    return out


def _outliers(trends: list[TensorTrend], views: list[CheckpointValues]) -> list[Finding]:
    out: list[Finding] = []
    for t in trends:
        if not _is_parameter(t.name) or len(t.intervals) < 3:
            continue
        rels = [i["rel_l2"] for i in t.intervals]
        if any(r is None for r in rels):
            continue
        for k, r in enumerate(rels):
            others = [x for j, x in enumerate(rels) if j != k]
            base = median(others)
            if r >= OUTLIER_FLOOR and (base == 0.0 or r / base >= OUTLIER_FACTOR):
                interval = t.intervals[k]
                times = f"{r / base:.3g}x" if base else "far above"
                out.append(finding(
                    "TS007", f"{t.name}: update between steps {interval['from']} and "
                    f"{interval['to']} is {r:.3g} of its norm, {times} "
                    f"its median update ({base:.3g}). Check the loss and gradient norms around "
                    "that step for a spike or divergence.", evidence=views[k + 1].path,
                    tensors=[t.name],
                    details={"rel_l2": r, "median_rel_l2": base, "interval": interval}))
    return out


def _scalar_series(views: list[CheckpointValues]) -> dict[str, list[float | None]]:
    keys = sorted({k for v in views for k in v.scalars
                   if ADAM_STEP.search(k) or LR.search(k) or SCHED_EPOCH.search(k)
                   or k in ("global_step", "step", "iteration", "epoch")})
    return {k: [v.scalars.get(k) for v in views] for k in keys}


def _optimizer(views: list[CheckpointValues], scalars: dict[str, list[float | None]],
               trends: list[TensorTrend]) -> list[Finding]:
    out: list[Finding] = []
    backwards: list[str] = []
    where: dict[str, Any] = {}
    for key, series in scalars.items():
        if not ADAM_STEP.search(key):
            continue
        for k in range(len(series) - 1):
            a, b = series[k], series[k + 1]
            if a is not None and b is not None and b < a:
                backwards.append(key)
                where[key] = {"from": views[k].path, "to": views[k + 1].path,
                              "before": a, "after": b}
                break
    if backwards:
        first = where[backwards[0]]
        out.append(finding(
            "TS002", f"{len(backwards)} optimizer step counter(s) go backwards, e.g. "
            f"{backwards[0]}: {first['before']:g} in {Path(first['from']).name} -> "
            f"{first['after']:g} in {Path(first['to']).name}. The optimizer state was reset "
            "or restored from an older checkpoint; check the resume code path.",
            evidence=first["to"], details={"counters": backwards[:200], "first": first}))
    collapsed: list[str] = []
    for t in trends:
        if not SECOND_MOMENT.search(t.name):
            continue
        for k in range(len(t.norms) - 1):
            a, b = t.norms[k], t.norms[k + 1]
            if a > 0 and b <= a * COLLAPSE_FACTOR:
                collapsed.append(t.name)
                break
    if collapsed:
        out.append(finding(
            "TS003", f"{len(collapsed)} second-moment tensor(s) collapse to zero between "
            f"checkpoints: {', '.join(collapsed[:6])}{' …' if len(collapsed) > 6 else ''}. "
            "Adam's state was re-initialised (a resume that did not load the optimizer?).",
            evidence=views[-1].path, tensors=collapsed[:500]))
    return out


def _learning_rate(views: list[CheckpointValues],
                   scalars: dict[str, list[float | None]]) -> list[Finding]:
    out: list[Finding] = []
    zero = [k for k, s in scalars.items() if LR.search(k)
            and any(v == 0.0 for v in s[1:] if v is not None)]
    if zero:
        k = zero[0]
        at = next(i for i, v in enumerate(scalars[k]) if i > 0 and v == 0.0)
        out.append(finding(
            "TS004", f"learning rate {k} is 0 at {Path(views[at].path).name} "
            f"(step {views[at].step}): nothing trains from there. Check the scheduler "
            "(warm-up length, total steps, a restored scheduler from another run).",
            evidence=views[at].path, details={"lr": {z: scalars[z] for z in zero}}))
    steps = next((s for k, s in scalars.items() if ADAM_STEP.search(k)), None)
    for key, series in scalars.items():
        if not SCHED_EPOCH.search(key) or steps is None:
            continue
        for k in range(len(series) - 1):
            a, b = series[k], series[k + 1]
            sa, sb = steps[k], steps[k + 1]
            if None in (a, b, sa, sb):
                continue
            assert a is not None and b is not None and sa is not None and sb is not None
            if sb > sa and b <= a:
                out.append(finding(
                    "TS005", f"{key} stays at {a:g}→{b:g} while the optimizer step goes "
                    f"{sa:g}→{sb:g} ({Path(views[k].path).name} → "
                    f"{Path(views[k + 1].path).name}): scheduler.step() is not being called, "
                    "or its state was restored from elsewhere; the learning rate is frozen.",
                    evidence=views[k + 1].path,
                    details={"scheduler": series, "optimizer_step": steps}))
                break
    return out
