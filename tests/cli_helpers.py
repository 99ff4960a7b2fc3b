"""The one way tests run the real CLI in a subprocess (where a subprocess is the point: exit
codes, stdout/stderr as a user sees them, a fresh interpreter, a process the kit confines).

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
