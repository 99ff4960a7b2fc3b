"""``ckptrescue drill DIR [--json] [--no-s3] [--stop] [--silent]``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from ckptrescue.cli.options import JsonOpt
from ckptrescue.cli.output import emit_json, interrupted, say
from ckptrescue.errors import ExitCode


def drill(
    out: Annotated[Path, typer.Argument(help="New directory for the drill incident.")],
    no_s3: Annotated[bool, typer.Option("--no-s3", help="Do not start the S3 server.")] = False,
    no_tf: Annotated[bool, typer.Option("--no-tf", help="Leave out the TensorFlow checkpoint.")]
    = False,
    stop: Annotated[bool, typer.Option("--stop", help="Stop the drill's S3 server and exit.")]
    = False,
    silent: Annotated[bool, typer.Option(
        "--silent", help="Build only the silent incident in DIR/silent: a dataset whose bytes "
        "verify but whose content went wrong and a run with a frozen layer (no image, no S3; "
        "playbook silent-failure).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Build a realistic incident sandbox: an XFS image holding a damaged training run.

    Injects a bit flip, a truncated newest checkpoint, a missing shard, a NaN-poisoned tensor, a
    checkpoint carrying a malicious pickle, unreadable sectors (ddrescue test-mode map) inside
    one checkpoint, and starts an S3-compatible server on 127.0.0.1 with a good and a corrupted
    version of a checkpoint. Stop the server with --stop.

    With --silent, builds only the silent incident, in DIR/silent (seconds; no image, no
    server): a baseline dataset and a new version with a label-flipped shard, an emptied
    field, a duplicated shard and a length blow-up, a run whose one layer froze, params.json
    for the silent-failure playbook and expected.json naming each fault.

    Ends with the exact command that runs the incident end to end. Ctrl-C while building
    removes what was built (and stops the S3 server), so the same command runs again.

    Examples:

    \b
        ckptrescue drill /tmp/drill
        ckptrescue drill /tmp/drill --stop
        ckptrescue drill /tmp/drill --silent
    """
    if silent:
        _silent(out, as_json=as_json, stop=stop)
        return
    from ckptrescue.drill import build

    if stop:
        stopped = build.stop(out)
        say("stopped the drill's S3 server" if stopped else "no drill S3 server was running")
        return
    result = _built(out, lambda: build.build(out, s3=not no_s3, tensorflow=not no_tf),
                    stop_server=True, as_json=as_json)
    if result is None:
        return
    rows = [("image", result.image), ("bad-sector map", result.badsectors_map),
            ("known-good", result.known_good)]
    if result.s3:
        rows.append(("s3", f"{result.s3['endpoint_url']}  s3://{result.s3['bucket']}/"
                           f"{result.s3['prefix']}"))
    _say_built("drill", result.root, rows, width=15)
    for f in result.faults:
        say(f"  fault {f['kind']:<22} {f['path']}  {', '.join(f['tensors'])}")
    say("")
    if result.s3:
        say("the S3 server is moto on 127.0.0.1: it accepts any credentials, but boto3 wants "
            "some" + ("" if _have_aws_credentials() else " (set on the command below)"))
    say("next: the whole incident end to end (the case goes into the drill's folder):")
    say(f"  {next_command(out, s3=bool(result.s3))}")
    if result.s3:
        say(f"afterwards, stop the S3 server: ckptrescue drill {_q(out)} --stop")


def next_command(out: Path, *, s3: bool) -> str:
    """The exact command that runs the drill's incident (as the README's quick start does)."""
    creds = "" if not s3 or _have_aws_credentials() else \
        "AWS_ACCESS_KEY_ID=drill AWS_SECRET_ACCESS_KEY=drill "
    return (f"{creds}ckptrescue playbook run full-incident --case {_q(out / 'case')} --yes "
            f"-P {_q(out / 'params.json')}")


def _q(path: Path) -> str:
    import shlex

    return shlex.quote(str(path))


def _have_aws_credentials() -> bool:
    import os

    return bool(os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY"))


@contextmanager
def _clean_on_interrupt(out: Path, *, stop_server: bool) -> Iterator[None]:
    """Ctrl-C while building: what the drill wrote is removed (so the same command runs
    again) and its S3 server stopped; a folder that held something before is left alone."""
    from ckptrescue.cli import lost_interrupt

    existed = out.exists()
    try:
        fresh = not existed or (out.is_dir() and not any(out.iterdir()))
    except OSError:  # unreadable: the build refuses it in one line, and nothing is removed
        fresh = False
    interrupts = lost_interrupt.arrived()
    try:
        yield
        if lost_interrupt.arrived() > interrupts:  # a library swallowed it: the same as any
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        if not fresh:
            raise
        import shutil

        if stop_server:
            from ckptrescue.drill import build

            build.stop(out)
        for child in list(out.iterdir()) if existed else [out]:
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
        interrupted(f"ckptrescue: interrupted; the half-built drill in {out} was removed"
             + (" and its S3 server stopped" if stop_server else "")
             + ": run the same command again")
        raise typer.Exit(int(ExitCode.INTERRUPT)) from None


def _built(folder: Path, build: Callable[[], Any], *, stop_server: bool, as_json: bool) -> Any:
    """Build an incident into ``folder`` (removed again on Ctrl-C); with ``as_json`` print
    what was built as JSON and give None, else give it for the text summary."""
    with _clean_on_interrupt(folder, stop_server=stop_server):
        result = build()
    if as_json:
        emit_json(result.to_json())
        return None
    return result


def _say_built(kind: str, root: Path, rows: list[tuple[str, object]], *, width: int) -> None:
    say(f"{kind} incident built in {root}")
    for label, value in rows:
        say(f"  {label:<{width}} {value}")


def _silent(out: Path, *, as_json: bool, stop: bool) -> None:
    from ckptrescue.drill import silent
    from ckptrescue.errors import UsageError

    if stop:
        raise UsageError("--silent starts no server: there is nothing to --stop")
    result = _built(out / "silent", lambda: silent.build(out), stop_server=False,
                    as_json=as_json)
    if result is None:
        return
    _say_built("silent", result.root, [("baseline", result.baseline),
                                       ("current", result.current), ("run", result.run)],
               width=10)
    for f in result.expected["dataset"]["faults"] + result.expected["run"]["faults"]:
        where = f.get("shard") or f"{f['tensor']} from step {f['step']}"
        say(f"  fault {f['kind']:<16} {f['code']}  {where}"
            + (f"  field {f['field']}" if f.get("field") else ""))
    say("")
    say("next: find them (the case goes into the drill's folder):")
    say(f"  ckptrescue playbook run silent-failure --case {_q(out / 'silent' / 'case')} --yes "
        f"-P {_q(result.root / 'params.json')}")


def register(app: typer.Typer) -> None:
    app.command("drill")(drill)
