"""``ckptrescue watch SOURCE --case C [--state F]``: keep auditing a dataset tree or S3 prefix.

Each pass is one ``watch.pass`` step run by the engine in the case (its findings and outputs
recorded like any step); between passes the command waits for inotify events (local trees,
via watchdog) or the interval. Ctrl-C stops it between or during a pass (exit 130; the state
and the case keep everything so far)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from ckptrescue.cli.from_action import literal
from ckptrescue.cli.output import interrupted, say


def watch(
    source: Annotated[str, typer.Argument(help="Dataset directory or s3://bucket/prefix "
                                          "(read only, never written).")],
    case_dir: Annotated[Path, typer.Option("--case", help="Case directory the passes are "
                                           "recorded in (created if new).")],
    state: Annotated[Path | None, typer.Option(
        "--state", help="The watch's SQLite state, outside SOURCE (resumes across restarts). "
        "Default: CASE/watch/<digest of SOURCE>.sqlite, kept by the case.")] = None,
    manifest: Annotated[Path | None, typer.Option(
        "--manifest", "-m", help="Check changed files against this manifest.")] = None,
    interval: Annotated[float, typer.Option(
        "--interval", min=0.0, help="Seconds between passes (S3), or the longest wait for "
        "inotify events before a full pass (local).")] = 60.0,
    full_every: Annotated[float, typer.Option(
        "--full-every", min=0.0, help="Seconds between full passes of a local tree (events "
        "can be missed: overflow, network filesystems).")] = 3600.0,
    passes: Annotated[int, typer.Option(
        "--passes", min=0, help="Stop after this many passes (0: until Ctrl-C).")] = 0,
    webhook: Annotated[str | None, typer.Option(
        "--webhook", help="POST each pass's findings as JSON to this http(s) URL.")] = None,
    prometheus_textfile: Annotated[Path | None, typer.Option(
        "--prometheus-textfile", help="Write node-exporter textfile metrics here after "
        "every pass.")] = None,
    endpoint_url: Annotated[str | None, typer.Option(
        "--endpoint-url", help="S3-compatible endpoint.")] = None,
) -> int:
    """Keep auditing new and changed files; findings go into the case, alerts out.

    The first pass is full (every file checked and remembered in the state); later passes
    check only what is new, changed or gone: by inotify for a local tree (a full pass every
    --full-every seconds too), by listing deltas for an S3 prefix. A changed file is checked
    against the manifest (SHA-256) and by its container check; without a manifest, a file
    modified in place is itself a finding (WA001-WA005). Exit 1 when the last pass found
    something bad, 0 otherwise; 130 on Ctrl-C.

    Example:

        ckptrescue watch /data/train --case /cases/watch --manifest /data/train.sha256 \\
            --webhook http://alerts:9000/hook \\
            --prometheus-textfile /var/lib/node_exporter/ckptrescue.prom
    """
    from ckptrescue.cli.from_action import step_error
    from ckptrescue.engine import executor as engine
    from ckptrescue.engine.events import StepFinished
    from ckptrescue.errors import EvidenceError, ExitCode
    from ckptrescue.record.case import Case
    from ckptrescue.stores.urls import is_s3

    if not is_s3(source) and not Path(source).is_dir():
        raise EvidenceError(f"{source}: not a directory (watch a dataset directory or an "
                            "s3:// prefix)")
    case = Case.open_or_create(case_dir, title=f"watch {source}")
    if state is None:
        state = default_state(case.root, source)
        state.parent.mkdir(mode=0o700, exist_ok=True)
    base: dict[str, Any] = {"source": source, "state": str(state),
                            "manifest": str(manifest) if manifest else None,
                            "webhook": webhook, "endpoint_url": endpoint_url,
                            "prometheus_textfile": str(prometheus_textfile)
                            if prometheus_textfile else None}
    from ckptrescue.actions.shared import refuse_unsafe_output
    from ckptrescue.datasets.watch.state import check_location, hold, release

    for target in (check_location(state, source), prometheus_textfile):
        if target:  # judged before anything is created (the pass judges them again)
            refuse_unsafe_output(case, str(target))
    held = hold(state, source)  # one watch per state for the whole run
    collector = None
    done = 0
    bad = False
    last_full = 0.0
    changed: list[bytes] | None = None
    try:
        if not is_s3(source):
            from ckptrescue.datasets.watch.local import ChangeCollector

            collector = ChangeCollector(source)
        while True:
            full = changed is None or time.monotonic() - last_full >= full_every
            args = {k: v for k, v in base.items() if v is not None}
            if not full:
                args["paths"] = [p.decode("utf-8", "surrogateescape") for p in changed or []]
            finished: StepFinished | None = None
            for event in engine.run(engine.single_step("watch.pass", literal(args)), case=case,
                                    resume=False):
                if isinstance(event, StepFinished):
                    finished = event
            assert finished is not None
            if finished.status not in {"ok", "findings"}:
                raise step_error(finished.status, finished.error, finished.exit_code,
                                 finished.hint, "watch.pass")
            out = finished.outputs
            for item in out.get("bad", []):
                say(f"[{item['code']}] {item['problem']}")
            say(out.get("answer", ""))
            bad = bool(out.get("bad"))
            if full:
                last_full = time.monotonic()
            done += 1
            if passes and done >= passes:
                break
            if collector is None:
                time.sleep(interval)
                changed = []
                continue
            changed = []
            deadline = time.monotonic() + interval
            while not changed and time.monotonic() < deadline:
                changed = collector.wait(max(0.0, deadline - time.monotonic()))
            if not changed:
                changed = None  # nothing happened in an interval: a full pass to be sure
    except KeyboardInterrupt:
        interrupted("ckptrescue: watch stopped; the state and the case keep every pass so far")
        return int(ExitCode.INTERRUPT)
    finally:
        if collector is not None:
            collector.stop()
        release(held)
    return int(ExitCode.FINDINGS if bad else ExitCode.OK)


def default_state(case_root: Path, source: str) -> Path:
    """Where a watch of ``source`` keeps its state in the case when --state is not given: one
    file per watched source, so the same command resumes."""
    import hashlib

    key = source if "://" in source else str(Path(source).absolute())
    return case_root / "watch" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.sqlite"


def register(app: typer.Typer) -> None:
    app.command("watch")(watch)
