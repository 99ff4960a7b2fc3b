"""The TUI snapshots (and the checkpoint fixtures behind them) do not depend on the CPU.

torch picks vectorised kernels by CPU capability (``ATEN_CPU_CAPABILITY``: ``default``,
``avx2``, ``avx512``...); values computed by CPU math (``torch.randn``, matmul, Adam) differ
between them, which once made the findings-screen snapshots (CRC values on screen) fail on other
machines. The fixtures now take every value from a specified integer generator
(``fixtures/checkpoints.py::exact_floats``); these tests hold that in place:

* the fixture bytes built under this machine's capability and under another are identical;
* the snapshot tests pass in a nested pytest run under the other capability.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tui_testlib import NESTED

REPO = Path(__file__).resolve().parents[2]

_BUILD = r"""
import hashlib, io, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import gc
gc.disable()  # what the imports make lives to the end: no collection walks it
import torch
from fixtures import checkpoints as fx
gc.freeze()
gc.enable()
out = {"capability": torch.backends.cpu.get_cpu_capability()}
with tempfile.TemporaryDirectory() as tmp:
    d = Path(tmp)
    for name, state in (("state", fx.training_state()), ("seed2", fx.training_state(2)),
                        ("wide", fx.training_state(1, wide=True))):
        fx.save_zip(d / "ckpt.pt", state)
        out[name + ".zip"] = hashlib.sha256((d / "ckpt.pt").read_bytes()).hexdigest()
        fx.save_legacy(d / "ckpt.pt", state)
        out[name + ".legacy"] = hashlib.sha256((d / "ckpt.pt").read_bytes()).hexdigest()
print(repr(out))
"""


def other_capability() -> tuple[str, str]:
    """(this machine's capability, a different one to run under)."""
    import torch

    mine = torch.backends.cpu.get_cpu_capability().lower()
    return mine, ("default" if mine != "default" else "avx2")


def _env(capability: str) -> dict[str, str]:
    env = dict(os.environ)
    env["ATEN_CPU_CAPABILITY"] = capability
    return env


def _fixture_hashes(capability: str) -> dict[str, str]:
    done = subprocess.run([sys.executable, "-c", _BUILD, str(REPO)], env=_env(capability),
                          capture_output=True, text=True, timeout=300, check=True)
    import ast

    return ast.literal_eval(done.stdout.strip().splitlines()[-1])


def test_fixture_bytes_same_under_another_cpu_capability() -> None:
    mine, other = other_capability()
    a, b = _fixture_hashes(mine), _fixture_hashes(other)
    if a.pop("capability") == b.pop("capability"):
        pytest.skip(f"this CPU offers only the {mine} capability: nothing to compare")
    assert a == b


def test_snapshots_pass_under_another_cpu_capability(run_dir: Path) -> None:
    """The whole snapshot module, re-run by pytest under the other capability."""
    _mine, other = other_capability()
    env = _env(other)
    env[NESTED] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(Path(__file__).with_name("test_snapshots.py"))],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    tail = "\n".join(done.stdout.splitlines()[-30:])
    assert done.returncode == 0, f"ATEN_CPU_CAPABILITY={other}:\n{tail}\n{done.stderr[-2000:]}"
