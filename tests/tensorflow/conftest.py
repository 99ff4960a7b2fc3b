"""Fixtures for the TensorFlow / Keras tests.

Every checkpoint is written by tensorflow-cpu / keras at test time: ``fixtures/tensorflow.py``
runs ONCE per session in a subprocess (TensorFlow's import is slow) and also saves every
variable as read back by ``tf.train.load_checkpoint`` (``reads/<name>/<i>.npy``), the reference
for bit-exact salvage checks. Tests damage *copies* of these originals.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _version(name: str) -> str:
    """The installed version of ``name`` (TensorFlow may be installed as tensorflow-cpu)."""
    for dist in (f"{name}-cpu", name):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


@pytest.fixture(scope="session")
def tf_originals() -> Path:
    """The originals, written once (the xdist workers wait for one writer and share it) and
    kept under build/ until ``fixtures/tensorflow.py`` or TensorFlow changes. Read-only:
    tests damage copies (``copy_of``)."""
    if importlib.util.find_spec("tensorflow") is None or importlib.util.find_spec("keras") is None:
        pytest.skip("tensorflow-cpu / keras not installed")
    from fixture_cache import cached_dir

    def write(out: Path) -> None:
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
        proc = subprocess.run([sys.executable, str(REPO / "fixtures" / "tensorflow.py"),
                               str(out)], capture_output=True, text=True, timeout=600, env=env,
                              check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        info = json.loads(proc.stdout.strip().splitlines()[-1])
        (out / "info.json").write_text(json.dumps(info))

    versions = ",".join(f"{name}=={_version(name)}" for name in ("tensorflow", "keras"))
    return cached_dir("tf-originals", write, ["fixtures/tensorflow.py"], extra=versions)


@pytest.fixture
def copy_of(tf_originals: Path, tmp_path: Path):
    """``copy_of("run")`` -> a fresh copy of one original under tmp_path."""

    def make(name: str) -> Path:
        src = tf_originals / name
        dst = tmp_path / "evidence" / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copy2(src, dst)
        return dst

    return make
