"""Builds the F2 family fixtures (Lightning, Accelerate, Orbax, DCP) with the real libraries, once:
each writer runs in a child process (``python -m fixtures.families.<lib> OUT``) into
``build/families/<lib>-<library version>/`` and is reused while that directory is complete (a
``.done`` marker). Tests copy what they mutate. A library that is missing skips the test (fails
under ``CKPTRESCUE_REQUIRE_PRIVILEGED=1``)."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from f1_build import copy  # noqa: F401 - the one copy helper both builds share

REPO = Path(__file__).resolve().parents[2]
LIBS = {"lightning": "lightning", "accelerate": "accelerate", "orbax": "orbax-checkpoint",
        "dcp": "torch"}


def built(lib: str) -> Path:
    """The directory the writer ``fixtures/families/<lib>.py`` filled (built when missing)."""
    dist = LIBS[lib]
    try:
        version = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{dist} is not installed (the fixtures extra)")
    out = REPO / "build" / "families" / f"{lib}-{version}"
    if not (out / ".done").is_file():
        shutil.rmtree(out, ignore_errors=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([sys.executable, "-m", f"fixtures.families.{lib}", str(out)],
                              cwd=REPO, capture_output=True, text=True, timeout=900,
                              env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin",
                                   "HOME": str(out.parent), "PYTHONHASHSEED": "0"})
        assert proc.returncode == 0, proc.stderr[-3000:]
        (out / ".done").write_text(version)
    return out


def oracle(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the real library's loader in a child process (``python -c code args...``)."""
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=600, env={"JAX_PLATFORMS": "cpu",
                                                       "PATH": "/usr/bin:/bin",
                                                       "PYTHONPATH": str(REPO)})
