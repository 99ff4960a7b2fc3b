"""A Ctrl-C that lands inside a callback the interpreter runs for itself is not lost.

The suite saw it once for real: ``drill`` interrupted while it imported a module ran on to the
end and exited 0, after "Exception ignored in: <function _get_module_lock.<locals>.cb>" (the
import system's weakref callback swallowed the KeyboardInterrupt). These children raise the
signal inside such a callback, where the interpreter must swallow it, and check that the
command still stops with one line and exit 130.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# in the child: SIGINT raised inside a weakref callback / a __del__, then one blocking 3 s sleep
# (the Ctrl-C must wake it, not wait for it to end)
SCRIPT = r"""
import gc, signal, sys, time, weakref
from ckptrescue.cli import lost_interrupt
if sys.argv[1] == "install":
    lost_interrupt.install()
class Thing:
    def __del__(self):
        signal.raise_signal(signal.SIGINT)
where = sys.argv[2]
started = time.monotonic()
try:
    if where == "weakref":
        thing = type("T", (), {})()
        ref = weakref.ref(thing, lambda _r: signal.raise_signal(signal.SIGINT))
        del thing
    else:
        Thing()
    gc.collect()
    time.sleep(3)
    print("ran to the end")
except KeyboardInterrupt:
    print("interrupted", "after the sleep" if time.monotonic() - started > 2.5 else "in the sleep")
    sys.exit(130)
"""


@pytest.mark.parametrize("where", ["weakref", "__del__"])
def test_a_ctrl_c_swallowed_by_a_callback_is_raised_again(where: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    fixed = subprocess.run([sys.executable, "-c", SCRIPT, "install", where], env=env,
                           capture_output=True, text=True, timeout=60)
    assert (fixed.returncode, fixed.stdout.strip()) == (130, "interrupted in the sleep"), \
        fixed.stderr
    assert "Exception ignored" not in fixed.stderr
    # the interpreter's own behaviour, which the hook is there for: the Ctrl-C is lost
    plain = subprocess.run([sys.executable, "-c", SCRIPT, "plain", where], env=env,
                           capture_output=True, text=True, timeout=60)
    assert (plain.returncode, plain.stdout.strip()) == (0, "ran to the end"), plain.stderr
    assert "Exception ignored" in plain.stderr and "KeyboardInterrupt" in plain.stderr


def test_other_unraisable_exceptions_still_reach_the_previous_hook() -> None:
    script = ("import gc, sys\nfrom ckptrescue.cli import lost_interrupt\n"
              "lost_interrupt.install(); lost_interrupt.install()\n"
              "class T:\n    def __del__(self):\n        raise ValueError('boom')\n"
              "T(); gc.collect(); print('went on')\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "went on"
    assert out.stderr.count("ValueError: boom") == 1, out.stderr


def test_the_command_line_installs_it() -> None:
    out = subprocess.run([sys.executable, "-c",
                          "import sys; from ckptrescue.cli.main import run; run(['--version']);"
                          " print(getattr(sys.unraisablehook, '_redelivers_interrupts', 0))"],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.stdout.strip().splitlines()[-1] == "True", out.stderr
