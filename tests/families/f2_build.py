"""Builds the F2 family fixtures (Lightning, Accelerate, Orbax, DCP) with the real libraries, once:
each writer runs in a child process (``python -m fixtures.families.<lib> OUT``) into
``build/test-fixtures/family-<lib>-<key>/`` (``tests/fixture_cache.py``). Tests copy what they
mutate. A library that is missing skips the test (fails under
``CKPTRESCUE_REQUIRE_PRIVILEGED=1``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import f1_build
import warm_python
from f1_build import copy  # noqa: F401 - the one copy helper both builds share

REPO = Path(__file__).resolve().parents[2]
LIBS = {"lightning": "lightning", "accelerate": "accelerate", "orbax": "orbax-checkpoint",
        "dcp": "torch"}


def built(lib: str) -> Path:
    """The directory the writer ``fixtures/families/<lib>.py`` filled (built when missing)."""
    env = {"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin", "HOME": str(REPO / "build"),
           "PYTHONHASHSEED": "0", "PYTHONPATH": str(REPO)}
    return f1_build.built(lib, dist=LIBS[lib], env=env, timeout=900)


def oracle(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the real library's loader in a child process (``python -c code args...``)."""
    return warm_python.run(code, *args, cwd=REPO, timeout=600,
                           env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin",
                                "PYTHONPATH": str(REPO)})
