"""``ckptrescue manifest build|audit``, ``dataset verify`` and ``recover``: training-data integrity.

A thin adapter over :mod:`ckptrescue.datasets`; results go to stdout, progress to stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ckptrescue.cli.options import JsonOpt, OptionalCaseOpt
from ckptrescue.cli.output import emit_json, say
from ckptrescue.errors import ExitCode

if TYPE_CHECKING:
    from ckptrescue.case import Case
    from ckptrescue.datasets.progress import Progress

manifest_app = typer.Typer(help="Checksum manifests of dataset directories (sha256sum format).",
                           no_args_is_help=True)
dataset_app = typer.Typer(help="Container-level checks of dataset files that need no manifest.",
                          no_args_is_help=True)

DirArg = Annotated[Path, typer.Argument(help="Dataset directory (read only, never written).")]
SourceArg = Annotated[str, typer.Argument(
    help="Dataset directory or s3://bucket/prefix (read only, never written).")]
EndpointOpt = Annotated[str | None, typer.Option(
    "--endpoint-url", help="S3-compatible endpoint (for an s3:// dataset).")]
JobsOpt = Annotated[int | None, typer.Option("--jobs", "-j", min=1,
                                             help="Files hashed in parallel (default: CPUs).")]
SchedulerOpt = Annotated[str | None, typer.Option(
    "--scheduler", help="Dask scheduler address (tcp://host:8786): spread the work over a "
    "cluster whose workers see DIR at the same path. Needs the [cluster] extra.")]
NoProgressOpt = Annotated[bool, typer.Option("--no-progress", help="No progress bar on stderr.")]


def _case(case_dir: Path | None) -> Case | None:
    if case_dir is None:
        return None
    from ckptrescue.case import Case

    return Case.open(case_dir)


class _ProgressBar:
    """One self-overwriting stderr line: files, bytes, rate and ETA."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.shown = False
        self.tty = sys.stderr.isatty()
        self.last = 0.0

    def __call__(self, p: Progress) -> None:
        import time

        now = time.monotonic()
        final = p.files_done >= p.files_total
        if not self.tty and not final and now - self.last < 10.0:
            return  # a log file gets one line per 10 s, not a flood
        self.last = now
        mib = 1 << 20
        eta = "--" if p.eta_s is None else _hms(p.eta_s)
        pct = 100.0 * p.bytes_done / p.bytes_total if p.bytes_total else 100.0
        line = (f"{self.label}: {p.files_done}/{p.files_total} files, "
                f"{p.bytes_done / mib:.0f}/{p.bytes_total / mib:.0f} MiB ({pct:.0f}%), "
                f"{p.rate / mib:.0f} MiB/s, ETA {eta}")
        sys.stderr.write(("\r" + line + "\x1b[K") if self.tty else line + "\n")
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown and self.tty:
            sys.stderr.write("\n")
        self.shown = False


def _hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}"


@manifest_app.command("build")
def build(
    directory: SourceArg,
    out: Annotated[Path, typer.Option("--output", "-o", help="Manifest to write (outside DIR); "
                                      "OUT.jsonl is written beside it.")],
    jobs: JobsOpt = None,
    scheduler: SchedulerOpt = None,
    no_progress: NoProgressOpt = False,
    endpoint_url: EndpointOpt = None,
    case_dir: OptionalCaseOpt = None,
    as_json: JsonOpt = False,
) -> int:
    """SHA-256 of every file under DIR, in `sha256sum -c` format plus a JSON-lines sidecar.

    Streaming and parallel; an interrupted build resumes from OUT.partial.jsonl. Symlinks are
    followed only to regular files inside DIR; FIFOs, sockets and devices are skipped and listed.

    DIR may also be s3://bucket/prefix: every object is hashed where it lives (streamed, never
    stored), with keys relative to the prefix as names.

    Example:

        ckptrescue manifest build /data/imagenet -o /cases/INC-7/imagenet.sha256 --jobs 4
    """
    from ckptrescue.datasets.manifest import build_manifest
    from ckptrescue.datasets.walk import display

    bar = None if no_progress else _ProgressBar("hashing")
    try:
        case = _case(case_dir)
        if case is not None:  # recorded in the case: a one-step plan on the engine
            from ckptrescue.cli.bridge import run_action

            result = run_action("manifest.build", {"dir": str(directory), "output": str(out),
                                                   "jobs": jobs, "scheduler": scheduler,
                                                   "endpoint_url": endpoint_url},
                                case=case, quiet=no_progress)
        else:
            result = build_manifest(directory, out, jobs=jobs, scheduler=scheduler,
                                    progress=bar, case=None, endpoint_url=endpoint_url)
    except KeyboardInterrupt:
        from ckptrescue.datasets.manifest import partial_path

        if bar is not None:
            bar.close()  # end the progress line before the message
        sys.stderr.write(f"ckptrescue: interrupted; finished files are kept in "
                         f"{partial_path(out)}: run the same command again to resume\n")
        raise typer.Exit(int(ExitCode.INTERRUPT)) from None
    finally:
        if bar is not None:
            bar.close()
    for s in result.skipped:
        sys.stderr.write(f"skipped: {display(s.rel)}: {s.reason}\n")
    for u in result.unreadable:
        sys.stderr.write(f"UNREADABLE: {display(u.rel)}: {u.error} at offset {u.offset}\n")
    if as_json:
        emit_json(result.to_json())
    else:
        say(result.answer())
    return int(ExitCode.OK if result.ok else ExitCode.FINDINGS)


@manifest_app.command("audit")
def audit_cmd(
    directory: SourceArg,
    manifest: Annotated[Path, typer.Argument(help="Manifest (sha256sum format; its .jsonl "
                                             "sidecar is used for sizes when present).")],
    quick: Annotated[bool, typer.Option("--quick", help="Compare size and mtime only "
                                        "(reads no content).")] = False,
    jobs: JobsOpt = None,
    scheduler: SchedulerOpt = None,
    no_progress: NoProgressOpt = False,
    endpoint_url: EndpointOpt = None,
    case_dir: OptionalCaseOpt = None,
    as_json: JsonOpt = False,
) -> int:
    """Check every file against a manifest: ok, corrupted, changed, missing, new, unreadable.

    Exit 0 when every file matches, 1 otherwise.

    Example:

        ckptrescue manifest audit /data/imagenet /cases/INC-7/imagenet.sha256 --json
    """
    from ckptrescue.datasets.audit import audit
    from ckptrescue.datasets.walk import display

    bar = None if (no_progress or quick) else _ProgressBar("auditing")
    try:
        case = _case(case_dir)
        if case is not None:
            from ckptrescue.cli.bridge import run_action

            result = run_action("manifest.audit", {"dir": str(directory),
                                                   "manifest": str(manifest), "quick": quick,
                                                   "jobs": jobs, "scheduler": scheduler,
                                                   "endpoint_url": endpoint_url},
                                case=case, quiet=no_progress)
        else:
            result = audit(directory, manifest, quick=quick, jobs=jobs, scheduler=scheduler,
                           progress=bar, case=None, endpoint_url=endpoint_url)
    finally:
        if bar is not None:
            bar.close()
    if as_json:
        emit_json(result.to_json())
    else:
        for row in result.files:
            if row.status != "ok":
                say(f"{row.status.upper():<11} {display(row.rel)}"
                    + (f"  ({row.reason})" if row.reason else ""))
        say("counts: " + ", ".join(f"{k}={v}" for k, v in result.counts.items()))
        say(result.answer())
    for note in result.notes:
        sys.stderr.write(f"note: {note}\n")
    return int(ExitCode.OK if result.ok else ExitCode.FINDINGS)


@dataset_app.command("verify")
def verify_cmd(
    directory: DirArg,
    jobs: JobsOpt = None,
    scheduler: SchedulerOpt = None,
    case_dir: OptionalCaseOpt = None,
    as_json: JsonOpt = False,
) -> int:
    """Check every TFRecord, tar/WebDataset shard, Parquet, JSON-lines and .npy/.npz file.

    Needs no manifest: TFRecord length and data CRCs per record, tar header checksums and
    truncated members (naming the sample key), Parquet footer and every column chunk,
    every JSON line, .npy/.npz headers against sizes. Exit 1 when anything is damaged.

    Example:

        ckptrescue dataset verify /data/shards --json
    """
    from ckptrescue.datasets.verify import verify_dataset

    case = _case(case_dir)
    if case is not None:
        from ckptrescue.cli.bridge import run_action

        result = run_action("dataset.verify", {"dir": str(directory), "jobs": jobs,
                                               "scheduler": scheduler}, case=case)
    else:
        result = verify_dataset(directory, jobs=jobs, scheduler=scheduler, case=None)
    if as_json:
        emit_json(result.to_json())
    else:
        for line in result.lines():
            say(line)
        say(result.answer())
    return int(ExitCode.OK if result.ok else ExitCode.FINDINGS)


def recover_cmd(
    directory: DirArg,
    manifest: Annotated[Path, typer.Option("--manifest", help="Manifest of the good state.")],
    source: Annotated[str, typer.Option("--from", help="Snapshots directory "
                                        "(SNAPSHOTS/<name>/<paths>) or s3://bucket/prefix "
                                        "with versioning.")],
    to: Annotated[Path, typer.Option("--to", help="Recovery directory (outside DIR).")],
    endpoint_url: Annotated[str | None, typer.Option("--endpoint-url",
                                                     help="S3 endpoint (for S3 sources).")] = None,
    from_audit: Annotated[Path | None, typer.Option(
        "--from-audit", help="JSON of an earlier `manifest audit --json` run with this "
        "manifest: recover the files it found damaged instead of auditing DIR again.")] = None,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", min=1, help="Files recovered at "
                                             "once (default 8 from S3, CPUs from snapshots).")
                    ] = None,
    case_dir: OptionalCaseOpt = None,
    as_json: JsonOpt = False,
) -> int:
    """Bring back the last good version of every damaged or missing file, verified.

    Audits DIR against the manifest (or takes the damaged files from --from-audit), then, for
    each corrupted, changed, missing or unreadable file, takes the newest backup version whose
    SHA-256 matches the manifest and copies it into RECOVERY_DIR/<same path>, verified. Never
    writes into DIR. Exit 1 when something could not be recovered.

    Example:

        ckptrescue recover /data/ds --manifest ds.sha256 --from /backups/snapshots --to /recovery
    """
    from ckptrescue.datasets.recover import recover

    case = _case(case_dir)
    if case is not None:
        from ckptrescue.cli.bridge import run_action

        result = run_action("recover", {"dir": str(directory), "manifest": str(manifest),
                                        "source": str(source), "to": str(to),
                                        "endpoint_url": endpoint_url,
                                        "audit_report": str(from_audit) if from_audit else None,
                                        "jobs": jobs}, case=case)
    else:
        result = recover(directory, manifest=manifest, source=source, to=to,
                         endpoint_url=endpoint_url, audit_report=from_audit, jobs=jobs,
                         case=None)
    if as_json:
        emit_json(result.to_json())
    else:
        for line in result.lines():
            say(line)
        say(result.answer())
    return int(ExitCode.OK if result.ok else ExitCode.FINDINGS)


def register(app: typer.Typer) -> None:
    app.add_typer(manifest_app, name="manifest")
    app.add_typer(dataset_app, name="dataset")
    app.command("recover")(recover_cmd)
