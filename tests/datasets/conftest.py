"""Fixtures for the dataset tests: a TFRecord written by TensorFlow once across workers and runs
(``tests/tf_build.py``) and fresh mixed-format dataset folders (the btrfs image with a bad block is in the
suite's root ``conftest.py``: checkpoint reads use it too)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from fixtures import datasets as fx  # noqa: E402


@pytest.fixture(scope="session")
def tf_tfrecord() -> Path:
    """A TFRecord file written by tensorflow-cpu's tf.io.TFRecordWriter: once for every worker
    and run, by the same TensorFlow process that writes the TensorFlow tests' checkpoints
    (``tests/tf_build.py``). Read it, never change it."""
    from tf_build import tf_written

    return tf_written() / fx.TF_RECORD_FILE


@pytest.fixture
def dataset(tmp_path: Path, tf_tfrecord: Path) -> tuple[Path, dict[str, Path]]:
    root = tmp_path / "ds"
    return root, fx.make_dataset(root, tf_tfrecord)
