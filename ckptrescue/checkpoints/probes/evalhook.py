"""The downstream check hook: run the responder's own evaluation command against a checkpoint,
confined, and record its metric, so that ``rank`` can answer "resume from the newest checkpoint
that also passes the eval".

The command is an argv template (never shell text) whose ``{checkpoint}`` placeholder (anywhere
in an argument: ``--ckpt={checkpoint}``) becomes the checkpoint's path. It is the responder's
code, not a forensic tool: the guard's tool allowlist does not judge it; it runs through
:func:`ckptrescue.effects.sandbox.run_confined` (bubblewrap: the whole filesystem read-only, one
scratch directory writable, no network, no block devices, its own user/pid/mount namespaces,
no capabilities; RLIMIT_AS, RLIMIT_CPU, a wall-clock timeout that kills its whole process tree).
What the checkpoint could make the eval do (``torch.load`` of a hostile pickle) stays inside.

The metric: with ``metric_regex``, the last match in stdout (its group ``metric``, else its first
group, else the whole match); otherwise the last non-empty stdout line, read as JSON
``{"metric": x}`` or a bare number. Status:

* ``passed``: the command exited 0 and the metric meets the thresholds (``min``: metric >= min,
  ``max``: metric <= max; without a threshold, exit 0 passes and the metric is recorded if
  printed);
* ``failed``: it exited 0 but the metric misses a threshold (a NaN metric misses every one);
* ``error``: a non-zero exit, a signal (the memory or CPU limit), no metric where a threshold
  needs one, or a sandbox that could not start (the command was then not run: there is no
  unconfined fallback);
* ``timeout``: the wall-clock limit ended it.

Nothing is written into a case by this module beyond the runner's own ``sandbox.run`` record
and the command's stdout/stderr artifacts; :class:`EvalResult` carries one ``checkpoint.eval``
audit record (argv, checkpoint, metric, status, duration, limits) for the engine to write.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptrescue.effects.sandbox import run_confined
from ckptrescue.errors import UsageError
from ckptrescue.model import JsonObject, Recorded

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

PLACEHOLDER = "{checkpoint}"
STATUSES = ("passed", "failed", "error", "timeout")
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_MEMORY_MB = 8192


@dataclass
class EvalResult(Recorded):
    """One evaluation of one checkpoint (see the module docstring)."""

    checkpoint: str
    argv: list[str]
    status: str
    metric: float | None = None
    threshold: dict[str, float] = field(default_factory=dict)  # "min" and/or "max"
    returncode: int | None = None
    signal: str | None = None
    stdout_sha256: str | None = None
    stderr_sha256: str | None = None
    stderr_tail: str = ""
    duration_s: float = 0.0
    reason: str = ""
    limits: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def to_json(self) -> JsonObject:
        return {"checkpoint": self.checkpoint, "argv": self.argv, "status": self.status,
                "metric": self.metric, "threshold": self.threshold,
                "returncode": self.returncode, "signal": self.signal,
                "stdout_sha256": self.stdout_sha256, "stderr_sha256": self.stderr_sha256,
                "duration_s": round(self.duration_s, 3), "reason": self.reason,
                "limits": self.limits}


def argv_template(value: str | Sequence[str]) -> list[str]:
    """The argv template of ``--eval``: a string, or a one-element list, is split like a shell
    would (``shlex``, nothing is run through a shell); a longer list is the argv as given.
    It must hold ``{checkpoint}``."""
    if isinstance(value, str):
        parts = shlex.split(value)
    elif len(value) == 1:
        parts = shlex.split(str(value[0]))
    else:
        parts = [str(v) for v in value]
    if not parts:
        raise UsageError("--eval: an empty command")
    if not any(PLACEHOLDER in p for p in parts):
        raise UsageError(f"--eval: the command must name the checkpoint as {PLACEHOLDER} "
                         f"(e.g. python eval.py {PLACEHOLDER})")
    return parts


def parse_metric(stdout: str, metric_regex: str | None = None) -> float | None:
    """The metric a command printed (see the module docstring), else None."""
    if metric_regex:
        matches = list(re.finditer(metric_regex, stdout, re.MULTILINE))
        if not matches:
            return None
        m = matches[-1]
        text = (m.group("metric") if "metric" in m.re.groupindex
                else m.group(1) if m.re.groups else m.group(0))
        return _number(text)
    lines = [ln.strip() for ln in stdout.splitlines() if ln.strip()]
    if not lines:
        return None
    last = lines[-1]
    try:
        data = json.loads(last)
    except ValueError:
        return _number(last)
    if isinstance(data, dict):
        data = data.get("metric")
    if isinstance(data, bool) or not isinstance(data, int | float):
        return None
    return float(data)


def _number(text: str | None) -> float | None:
    try:
        return float(str(text).strip())
    except (TypeError, ValueError):
        return None


def _judge(metric: float | None, threshold: dict[str, float]) -> tuple[str, str]:
    if not threshold:
        return "passed", ""
    if metric is None:
        return "error", "the command printed no metric (a threshold needs one)"
    if math.isnan(metric):
        return "failed", "the metric is NaN"
    if "min" in threshold and metric < threshold["min"]:
        return "failed", f"metric {metric:g} < min {threshold['min']:g}"
    if "max" in threshold and metric > threshold["max"]:
        return "failed", f"metric {metric:g} > max {threshold['max']:g}"
    return "passed", ""


def run_eval(
    argv_template: Sequence[str],
    checkpoint: Path,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_mb: int | None = DEFAULT_MEMORY_MB,
    metric_regex: str | None = None,
    min_metric: float | None = None,
    max_metric: float | None = None,
    case: Case | None = None,
) -> EvalResult:
    """Run the responder's eval command on ``checkpoint`` confined; never raises for what the
    command does (a crash, a kill, a timeout are statuses). ``case``: where the runner records
    the run and stores its output (read only otherwise)."""
    template = [str(a) for a in argv_template]
    if not any(PLACEHOLDER in a for a in template):
        raise UsageError(f"the eval command must name the checkpoint as {PLACEHOLDER}")
    if metric_regex:
        try:
            re.compile(metric_regex)
        except re.error as exc:
            raise UsageError(f"--eval-metric-regex: {exc}") from exc
    path = str(Path(checkpoint).absolute())
    argv = [a.replace(PLACEHOLDER, path) for a in template]
    threshold = {k: float(v) for k, v in (("min", min_metric), ("max", max_metric))
                 if v is not None}
    run = run_confined(argv, case=case, purpose="eval", memory_mb=memory_mb,
                       timeout_s=timeout_s, readable=[path])
    metric = parse_metric(run.stdout, metric_regex)
    if run.status == "sandbox-unavailable":
        status, reason = "error", run.reason
    elif run.status == "timeout":
        status, reason = "timeout", f"still running after {timeout_s:g} s: killed"
    elif run.signal_name is not None:
        status = "error"
        reason = f"killed by {run.signal_name}" + (
            " (the CPU-time limit)" if run.signal_name == "SIGXCPU" else "")
    elif run.returncode != 0:
        last = (run.stderr.strip().splitlines() or [""])[-1][:300]
        status = "error"
        reason = f"exit status {run.returncode}" + (f": {last}" if last else "")
        if "MemoryError" in run.stderr or "bad_alloc" in run.stderr:
            reason += f" (the memory limit: {memory_mb} MB)"
    else:
        status, reason = _judge(metric, threshold)
    result = EvalResult(
        checkpoint=path, argv=argv, status=status, metric=metric, threshold=threshold,
        returncode=run.returncode, signal=run.signal_name, stdout_sha256=run.stdout_sha256,
        stderr_sha256=run.stderr_sha256, stderr_tail=run.stderr[-2000:],
        duration_s=run.duration_s, reason=reason,
        limits={**run.limits, "memory_mb": memory_mb})
    details = result.to_json()
    details["confinement"] = ("bubblewrap: / read-only, scratch writable, no network, "
                              "user/pid/mount namespaces, no capabilities")
    result.record("checkpoint.eval", details)
    return result
