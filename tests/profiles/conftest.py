"""Fixtures for the profile tests: datasets written by fixtures/profiles.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from fixtures import profiles as fx  # noqa: E402


@pytest.fixture(scope="session")
def incident_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One JSONL dataset per incident (and ``clean``), seed 1, written once per session."""
    root = tmp_path_factory.mktemp("incidents")
    for name in ("clean", *fx.INCIDENTS):
        fx.make_dataset(root / name, 1, None if name == "clean" else name)
    return root
