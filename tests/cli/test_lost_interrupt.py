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


# in the child: a command whose library swallows the Ctrl-C without a trace, run by main.run
SWALLOWED = r"""
import signal, sys
from ckptrescue.cli import main

def command(**_):
    try:
        signal.raise_signal(signal.SIGINT)
    except BaseException:  # a library's catch-all: no unraisable report, nothing re-raised
        pass
    print("ran to the end")
    return 0

main.app_for = lambda argv: command
sys.exit(main.run(["anything"]))
"""


def test_a_ctrl_c_swallowed_without_a_trace_still_ends_the_command_as_interrupted() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", SWALLOWED], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == "ran to the end"
    assert out.returncode == 130, out.stderr
    assert out.stderr.strip() == ("ckptrescue: interrupted, too late to stop the command: a "
                                  "library it was running swallowed the Ctrl-C, and it ran on "
                                  "to its end")
    # and a command that no Ctrl-C reached ends as it returned
    quiet = SWALLOWED.replace("signal.raise_signal(signal.SIGINT)", "pass")
    out = subprocess.run([sys.executable, "-c", quiet], env=env, capture_output=True,
                         text=True, timeout=60)
    assert (out.returncode, out.stderr) == (0, "")


DRILL = r"""
import signal, sys
from pathlib import Path
import typer
from ckptrescue.cli import lost_interrupt
from ckptrescue.cli.drill_cmd import _clean_on_interrupt

lost_interrupt.install()
out = Path(sys.argv[1])
try:
    with _clean_on_interrupt(out, stop_server=False):
        (out / "staging").mkdir(parents=True)
        try:
            signal.raise_signal(signal.SIGINT)
        except BaseException:
            pass
        (out / "disk.img").write_bytes(b"built to the end")
except typer.Exit as exc:
    sys.exit(exc.exit_code)
sys.exit(0)
"""


def test_a_drill_whose_ctrl_c_was_swallowed_removes_what_it_built(tmp_path: Path) -> None:
    out = tmp_path / "drill"
    res = subprocess.run([sys.executable, "-c", DRILL, str(out)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert res.returncode == 130, res.stderr
    assert "the half-built drill" in res.stderr and "run the same command again" in res.stderr
    assert not out.exists()
