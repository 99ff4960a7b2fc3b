"""Builds the F1 family fixtures (DeepSpeed, Megatron) with the real libraries, once: each writer
runs in a child process (``python -m fixtures.families.<lib> OUT``) into
``build/test-fixtures/family-<lib>-<key>/`` (``tests/fixture_cache.py``: keyed by the writer's
source and the library version, built once across workers and runs). Tests copy what they
mutate. A missing library skips the test (fails under ``CKPTRESCUE_REQUIRE_PRIVILEGED=1``)."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import warm_python
from fixture_cache import cached_dir

REPO = Path(__file__).resolve().parents[2]
LIBS = {"deepspeed": "deepspeed", "megatron": "megatron-core"}


def _env() -> dict[str, str]:
    return {"DS_ACCELERATOR": "cpu", "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", str(REPO / "build")), "PYTHONHASHSEED": "0",
            "PYTHONPATH": str(REPO),
            "TORCH_EXTENSIONS_DIR": str(REPO / "build" / "families" / "torch_extensions")}


def built(lib: str, dist: str | None = None, env: dict[str, str] | None = None,
          timeout: float = 1200) -> Path:
    """The directory the writer ``fixtures/families/<lib>.py`` filled (built once per writer
    source and library version; ``tests/fixture_cache.py``)."""
    dist = dist or LIBS[lib]
    try:
        version = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{dist} is not installed (the fixtures extra)")

    def write(out: Path) -> None:
        proc = subprocess.run([sys.executable, "-m", f"fixtures.families.{lib}", str(out)],
                              cwd=REPO, capture_output=True, text=True, timeout=timeout,
                              env=env if env is not None else _env())
        assert proc.returncode == 0, proc.stderr[-3000:]

    sources = [f"fixtures/families/{lib}.py", "fixtures/families/__init__.py",
               "fixtures/checkpoints.py"]
    return cached_dir(f"family-{lib}", write, sources, extra=f"{dist}=={version}")


def copy(src: Path, dst: Path) -> Path:
    if src.is_dir():
        shutil.copytree(src, dst, symlinks=True)
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    return dst


def oracle(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the real library's loader in a child process (``python -c code args...``)."""
    return warm_python.run(code, *args, cwd=REPO, env=_env(), timeout=600)


def codes(report: object, prefix: str = "FM") -> dict[str, list[list[str]]]:
    """code -> the ranks each finding of that code names."""
    out: dict[str, list[list[str]]] = {}
    for f in report.findings:  # type: ignore[attr-defined]
        if f.code.startswith(prefix):
            out.setdefault(f.code, []).append(list(f.details.get("ranks", [])))
    return out
