"""Sandboxed TensorFlow reader: list and read every variable of each TensorBundle prefix.

Run only through :func:`ckptrescue.effects.sandbox.run_child` (bubblewrap, seccomp, audit hook,
resource limits, timeout, no credentials; read-only binds of the checkpoints' files). One child
serves every TensorFlow checkpoint of a run (the import is slow).

Request: ``{"prefixes": [PREFIX, ...], "max_errors": 50}``. Output (one JSON line)::

    {"ok": true, "tensorflow": "2.21.0",
     "results": {PREFIX: {"list_ok": bool, "list_error": {"type", "message"} | null,
                          "variables": N, "read_ok": N,
                          "errors": [{"name", "type", "message"}], "seconds": S}}}

Progress lines ``BEGIN <prefix>`` / ``END <prefix>`` are appended to ``progress`` in the child's
scratch directory (handed back by ``run_child(keep=...)``, and echoed on stderr), so that when
TensorFlow's C++ code aborts the process (a CHECK
failure on an inconsistent slice entry: SIGABRT, with a long stack trace on stderr) the parent
can tell which checkpoint killed it.

Parent side: :func:`load_reports` (called by the generic probe for formats whose ``load_batch``
names it) runs ONE child for all TensorFlow reports of a run; if the child dies, the checkpoint
in progress gets the crash as its outcome and a new child continues with the rest.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from ckptrescue.sandbox_children import boundary

if TYPE_CHECKING:
    from ckptrescue.checkpoints.base import CheckpointReport
    from ckptrescue.record.case import Case

TF_FORMATS = ("tf-tensorbundle", "tf-savedmodel")
PROGRESS = "progress"


def _err(exc: BaseException) -> dict[str, str]:
    message = getattr(exc, "message", None) or str(exc)
    return {"type": type(exc).__name__, "message": str(message)[:2000]}


def _probe_prefix(tf: Any, prefix: str, max_errors: int) -> dict[str, Any]:
    start = time.monotonic()
    out: dict[str, Any] = {"list_ok": False, "list_error": None, "variables": 0, "read_ok": 0,
                           "errors": []}
    try:
        names = [n for n, _shape in tf.train.list_variables(prefix)]
        out["list_ok"] = True
    except Exception as exc:  # noqa: BLE001 - TF's own error text is the result
        out["list_error"] = _err(exc)
        names = []
    out["variables"] = len(names)
    if names:
        try:
            reader = tf.train.load_checkpoint(prefix)
        except Exception as exc:  # noqa: BLE001
            out["errors"].append({"name": None, **_err(exc)})
            reader = None
        for name in names if reader is not None else []:
            try:
                value = reader.get_tensor(name)
                del value
                out["read_ok"] += 1
            except Exception as exc:  # noqa: BLE001
                if len(out["errors"]) < max_errors:
                    out["errors"].append({"name": name, **_err(exc)})
    out["seconds"] = round(time.monotonic() - start, 3)
    return out


def main() -> None:
    req = boundary.start()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.train.list_variables  # noqa: B018 - resolve the lazy modules before the boundary closes
    boundary.enter(req)
    results = {}
    progress = os.path.join(req["scratch"], PROGRESS) if req.get("scratch") else None

    def mark(what: str, prefix: str) -> None:
        print(f"ckptrescue-tf-load: {what} {prefix}", file=sys.stderr, flush=True)
        if progress:
            with open(progress, "a") as fh:
                fh.write(f"{what} {prefix}\n")

    for prefix in req.get("prefixes", []):
        mark("BEGIN", prefix)
        results[prefix] = _probe_prefix(tf, prefix, int(req.get("max_errors", 50)))
        mark("END", prefix)
    print(json.dumps({"ok": True, "tensorflow": tf.__version__, "results": results}))


def _in_progress(progress: str) -> str | None:
    """The prefix the child had begun but not finished (from its progress file)."""
    begun = ended = None
    for line in progress.splitlines():
        what, _, prefix = line.partition(" ")
        if what == "BEGIN":
            begun = prefix
        elif what == "END":
            ended = prefix
    return begun if begun and begun != ended else None


def apply_result(report: CheckpointReport, result: dict[str, Any]) -> None:
    """Record one prefix's TF outcome on its report: ``report.load`` + an LD finding."""
    from ckptrescue.checkpoints.probes.checkpoint_load import disagree
    from ckptrescue.model import Finding, Severity

    report.load = {"status": "ok" if result.get("list_ok") and not result.get("errors")
                   else "error", "loader": "tensorflow", "result": result}
    if report.load["status"] == "ok":
        report.findings.append(Finding(
            "LD001", Severity.INFO, f"TensorFlow read all {result.get('variables')} variables",
            evidence=report.path, source="tf_load", details=result))
        return
    err = result.get("list_error") or (result.get("errors") or [{}])[0]
    names = tuple(e["name"] for e in result.get("errors", []) if e.get("name"))
    title = (f"TensorFlow raised {err.get('type')}: {str(err.get('message', ''))[:300]}"
             + (f" ({len(names)} variable(s) failed)" if names else ""))
    report.findings.append(Finding("LD002", Severity.ERROR, title, evidence=report.path,
                                   source="tf_load", tensors=names, details=result))
    disagree(report, title)


def load_reports(reports: list[CheckpointReport], *, case: Case | None = None,
                 memory_mb: int | None = 8192, timeout_s: float = 600.0) -> None:
    """``--load`` for every TensorFlow report: one sandbox child for all of them."""
    from ckptrescue.effects.sandbox import run_child
    from ckptrescue.model import Finding, Severity

    todo: dict[str, CheckpointReport] = {}
    for r in reports:
        prefix = r.extra.get("prefix")
        if r.format in TF_FORMATS and prefix:
            todo[str(prefix)] = r
    while todo:
        inputs = sorted({f for r in todo.values() for f in (r.files or [r.path])})
        outcome = run_child("tf_load", {"prefixes": list(todo)}, case=case, memory_mb=memory_mb,
                            timeout_s=timeout_s, inputs=inputs, keep=[PROGRESS])
        done_text = outcome.files.get(PROGRESS, "")
        if outcome.status in ("blocked", "sandbox-unavailable"):
            from ckptrescue.checkpoints.probes.checkpoint_load import record_outcome

            culprit = _in_progress(done_text) if outcome.status == "blocked" else None
            for prefix in [culprit] if culprit in todo else list(todo):
                record_outcome(todo.pop(prefix), outcome, "tensorflow")
            continue
        results = outcome.result.get("results", {}) if outcome.status == "ok" else {}
        for prefix, result in results.items():
            if prefix in todo:
                apply_result(todo.pop(prefix), result)
        if outcome.status == "ok":
            for r in todo.values():  # not reported by the child: say so
                r.load = {"status": "bad-output", "loader": "tensorflow"}
            return
        culprit = _in_progress(done_text)
        victims = [culprit] if culprit in todo else list(todo)
        for prefix in victims:
            r = todo.pop(prefix)
            r.load = {"loader": "tensorflow", **outcome.to_json()}
            r.findings.append(Finding(
                "LD003", Severity.CRITICAL,
                f"TensorFlow's reader child {outcome.status}"
                + (f" ({outcome.signal_name})" if outcome.signal_name else "")
                + " while reading this checkpoint", evidence=r.path, source="tf_load",
                details=outcome.to_json()))
            from ckptrescue.checkpoints.probes.checkpoint_load import disagree

            disagree(r, f"TensorFlow's reader child {outcome.status}")
        if culprit not in victims:
            return


if __name__ == "__main__":
    main()
