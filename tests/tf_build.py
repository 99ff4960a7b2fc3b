"""What TensorFlow itself writes for the tests, once: ``fixtures/tensorflow.py`` in one child
process (TensorFlow's import costs about 5 CPU-s) writes the checkpoints and Keras files of the
TensorFlow tests and the TFRecord file of the dataset tests into
``build/test-fixtures/tf-written-<key>/`` (``tests/fixture_cache.py``: keyed by both writers'
sources and the TensorFlow and Keras versions; built once across workers and runs). Read-only:
tests damage copies."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixture_cache import cached_dir

REPO = Path(__file__).resolve().parent.parent


def _version(name: str) -> str:
    """The installed version of ``name`` (TensorFlow may be installed as tensorflow-cpu)."""
    for dist in (f"{name}-cpu", name):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def tf_written() -> Path:
    """The directory ``fixtures/tensorflow.py`` filled. Without TensorFlow (tensorflow or
    tensorflow-cpu) and Keras the test skips (a failure in CI: ``tests/conftest.py``):
    TensorFlow's tests, and the dataset tests that read its TFRecord file."""
    if importlib.util.find_spec("tensorflow") is None or importlib.util.find_spec("keras") is None:
        pytest.skip("tensorflow-cpu / keras not installed")

    def write(out: Path) -> None:
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
        proc = subprocess.run([sys.executable, str(REPO / "fixtures" / "tensorflow.py"),
                               str(out)], capture_output=True, text=True, timeout=600, env=env,
                              check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        info = json.loads(proc.stdout.strip().splitlines()[-1])
        (out / "info.json").write_text(json.dumps(info))

    versions = ",".join(f"{name}=={_version(name)}" for name in ("tensorflow", "keras"))
    return cached_dir("tf-written", write, ["fixtures/tensorflow.py", "fixtures/datasets.py"],
                      extra=versions)
