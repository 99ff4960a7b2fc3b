"""Fixtures for the dataset tests: a TFRecord written by TensorFlow once per session (in a child
interpreter) and fresh mixed-format dataset folders (the btrfs image with a bad block is in the
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
    and run (``tests/fixture_cache.py``, keyed by the writer and TensorFlow's version; each
    worker's own write cost a TensorFlow import, about 5 CPU-s). Read it, never change it."""
    import importlib.metadata

    from fixture_cache import cached_dir

    try:
        version = importlib.metadata.version("tensorflow-cpu")
    except importlib.metadata.PackageNotFoundError:
        version = "absent"  # the writer then fails, as it did per session
    built = cached_dir("tf-tfrecord",
                       lambda out: fx.write_tfrecord_with_tensorflow(out / TF_RECORD_NAME),
                       ["fixtures/datasets.py"], extra=f"tensorflow-cpu=={version}")
    return built / TF_RECORD_NAME


TF_RECORD_NAME = "written-by-tf.tfrecord"


@pytest.fixture
def dataset(tmp_path: Path, tf_tfrecord: Path) -> tuple[Path, dict[str, Path]]:
    root = tmp_path / "ds"
    return root, fx.make_dataset(root, tf_tfrecord)
