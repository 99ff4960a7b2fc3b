"""Fixtures for the TensorFlow / Keras tests.

Every checkpoint is written by tensorflow-cpu / keras: ``fixtures/tensorflow.py`` runs once
across workers and runs, in a subprocess (``tests/tf_build.py``), and also saves every
variable as read back by ``tf.train.load_checkpoint`` (``reads/<name>/<i>.npy``), the reference
for bit-exact salvage checks. Tests damage *copies* of these originals.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


@pytest.fixture(scope="session")
def tf_originals() -> Path:
    """The originals, written once (the xdist workers wait for one writer and share it) and
    kept under build/ until a writer (``fixtures/tensorflow.py``, ``fixtures/datasets.py``),
    TensorFlow, Keras or Python changes (``tests/tf_build.py``). Read-only: tests damage copies
    (``copy_of``)."""
    from tf_build import tf_written

    return tf_written()


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
