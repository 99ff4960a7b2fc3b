"""Watch tests: fixture writers from the repository root; one moto server for the S3 passes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


@pytest.fixture(scope="module")
def s3server():  # noqa: ANN201
    from ckptrescue.stores.s3.localserver import start_local_s3

    server = start_local_s3()
    try:
        yield server
    finally:
        server.stop()
