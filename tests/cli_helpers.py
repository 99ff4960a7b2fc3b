"""How tests run the CLI: in-process (:func:`invoke`, typer's ``CliRunner`` isolation around
``cli.main.run``, the same exit codes and one-line messages) where a subprocess is not the
point, and :func:`run_cli`, the one way to run it in a subprocess where it is (a fresh
interpreter, signals, a process the kit confines, what the console script itself does).

``run_cli("probe", "--json", str(path))`` runs the installed ``ckptrescue`` console script with
stdin from ``/dev/null`` and returns the ``CompletedProcess`` (text mode, never raises on a
non-zero exit). ``clean_env=True`` gives it the environment the kit gives its own programs
(``effects.runner.minimal_env``: ``LC_ALL=C``, no credentials) instead of the test's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXE = str(Path(sys.executable).with_name("ckptrescue"))


def run_cli(*args: str, timeout: float = 300, env_extra: dict[str, str] | None = None,
            env: dict[str, str] | None = None, clean_env: bool = False,
            cwd: str | os.PathLike[str] | None = None,
            check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run ``ckptrescue *args``; ``env`` replaces the environment, ``env_extra`` adds to it."""
    if clean_env:
        from ckptrescue.effects.runner import minimal_env

        base = minimal_env()
    else:
        base = dict(os.environ) if env is None else dict(env)
    base.update(env_extra or {})
    return subprocess.run([EXE, *map(str, args)], capture_output=True, text=True,
                          errors="replace", stdin=subprocess.DEVNULL, env=base, cwd=cwd,
                          timeout=timeout,
                          check=check, start_new_session=clean_env)


def invoke(*args: str, env_extra: dict[str, str] | None = None,
           input: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``ckptrescue *args`` in this process; returns what :func:`run_cli` returns.

    ``cli.main.run`` turns exceptions into exit codes exactly as the console script does;
    stdout and stderr are captured by ``CliRunner``'s isolation (binary writes included).
    """
    from typer.testing import CliRunner

    from ckptrescue.cli.main import run

    runner = CliRunner()
    with runner.isolation(input=input, env=env_extra) as streams:
        code = run([str(a) for a in args])
        sys.stdout.flush()
        sys.stderr.flush()
        out = streams[0].getvalue().decode(errors="replace")
        err = streams[1].getvalue().decode(errors="replace")
    return subprocess.CompletedProcess(["ckptrescue", *map(str, args)], code, out, err)
