"""What the ``ckptrescue`` program's own process sets before it reads the command line
(``cli/process.main``), and what a library caller of ``cli.main.run`` does not inherit."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

from cli_helpers import invoke
from process_helpers import collected

_BLAS = """
import atexit, os, sys
from ckptrescue.cli.process import main

def report() -> None:
    import numpy  # noqa: F401
    print(os.environ.get("OPENBLAS_NUM_THREADS"), len(os.listdir("/proc/self/task")))

atexit.register(report)
sys.argv = ["ckptrescue", "--version"]
main()
"""


def test_numpy_in_a_command_starts_no_spinning_blas_threads_unless_asked() -> None:
    """The console script loads numpy with one BLAS thread (OpenBLAS otherwise starts one per
    core, each spinning on a CPU the scan needs); a responder's own setting is kept."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", _BLAS], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out[-2:] == ["1", "1"]
    if len(os.sched_getaffinity(0)) > 1:  # OpenBLAS starts no more threads than CPUs it may use
        out = subprocess.run([sys.executable, "-c", _BLAS], capture_output=True, text=True,
                             env={**env, "OPENBLAS_NUM_THREADS": "2"}, check=True).stdout.split()
        assert out[-2:] == ["2", "2"]


_COLLECTION = """
import atexit, gc, json, sys
import ckptrescue.datasets.manifest as manifest
from ckptrescue.cli.process import main

seen = {}
build = manifest.build_manifest

def watched(*args, **kwargs):
    seen["command"] = [gc.isenabled(), gc.get_freeze_count()]
    return build(*args, **kwargs)

manifest.build_manifest = watched
atexit.register(lambda: print(json.dumps({**seen, "exit": [gc.isenabled(), gc.get_freeze_count()]})))
sys.argv = ["ckptrescue", *sys.argv[1:]]
main()
"""


def _collection(*argv: str) -> dict[str, list[int]]:
    proc = subprocess.run([sys.executable, "-c", _COLLECTION, *argv], capture_output=True,
                          text=True, timeout=120)
    return json.loads(proc.stdout.splitlines()[-1])


def test_the_program_collects_garbage_again_once_its_command_line_is_parsed(
        tmp_path: Path) -> None:
    """Collection pauses while the program starts (modules, classes and the command tree live
    to the end); the command itself runs with collection on, and what start-up made frozen, so
    no collection (at exit neither) walks it again. A command line that never reaches a command
    still ends with collection on."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.bin").write_bytes(b"abc")
    ran = _collection("manifest", "build", str(tmp_path / "data"), "-o",
                      str(tmp_path / "m.sha256"), "--no-progress")
    enabled, frozen = ran["command"]
    assert enabled and frozen > 10_000  # typer, the command tree and the kit's modules
    assert ran["exit"][0]
    assert (tmp_path / "m.sha256").read_text().endswith("  a.bin\n")
    for argv in (("no-such-command",), ("manifest", "build", "--no-such-flag")):
        assert _collection(*argv)["exit"][0], argv



def test_a_library_caller_of_run_keeps_its_own_collection() -> None:
    """``cli.main.run`` in another program (the tests, a notebook) freezes nothing of it, and
    unfreezes nothing it froze. (The caller's frozen count alone would not tell: a frozen
    object that is freed leaves the count, and a test worker froze what collection imported.)"""
    mine: list[object] = []  # made after any freeze of the caller's
    caller_froze = gc.get_freeze_count() > 0
    assert collected(mine)
    assert invoke("--version").returncode == 0
    assert invoke("case", "--help").returncode == 0
    assert gc.isenabled()
    assert collected(mine)  # not frozen by run
    assert (gc.get_freeze_count() > 0) == caller_froze  # not unfrozen by run either


def test_a_drill_run_as_a_library_freezes_nothing_of_its_caller(tmp_path: Path) -> None:
    """The drill imports torch with collection paused; only the kit's own process freezes what
    it then holds (``ckptrescue.own_process``): here the caller's objects stay collectable."""
    mine: list[object] = []
    frozen = gc.get_freeze_count()
    res = invoke("drill", str(tmp_path / "drill"), "--silent")
    assert res.returncode == 0, res.stderr
    assert gc.isenabled()
    assert collected(mine)
    assert gc.get_freeze_count() <= frozen
