"""Fixtures for the object-store tests: Azurite, fake-gcs-server and moto over real HTTP on
127.0.0.1, one of each per session. An emulator that cannot start skips its tests, and fails
them under CKPTRESCUE_REQUIRE_PRIVILEGED=1 (CI). Objects are written with the SDKs directly
(``Kit.put``), never through the kit, whose clients are read-only."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from stores_testlib import Kit, make_kit  # noqa: E402

from fixtures import stores as fs  # noqa: E402

REQUIRE = os.environ.get("CKPTRESCUE_REQUIRE_PRIVILEGED") == "1"


def _unavailable(what: str, exc: BaseException) -> None:
    if REQUIRE:
        pytest.fail(f"CKPTRESCUE_REQUIRE_PRIVILEGED=1 but {what} cannot start: {exc}")
    pytest.skip(f"{what} cannot start: {exc}")


@pytest.fixture(scope="session")
def azurite() -> Iterator[fs.Azurite]:
    try:
        pytest.importorskip("azure.storage.blob")
        server = fs.start_azurite()
    except (fs.EmulatorError, OSError) as exc:
        _unavailable("Azurite", exc)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def fakegcs() -> Iterator[fs.FakeGcs]:
    try:
        pytest.importorskip("google.cloud.storage")
        server = fs.start_fake_gcs()
    except (fs.EmulatorError, OSError) as exc:
        _unavailable("fake-gcs-server", exc)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def motoserver() -> Iterator[Any]:
    from ckptrescue.stores.s3.localserver import start_local_s3

    try:
        server = start_local_s3()
    except Exception as exc:
        _unavailable("moto", exc)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fuse_ok() -> None:
    problem = None
    if not Path("/dev/fuse").exists():
        problem = "no /dev/fuse"
    elif os.geteuid() != 0:
        problem = "the FUSE view needs root here (no fusermount)"
    else:
        try:
            import fuse  # noqa: F401
        except (ImportError, OSError) as exc:
            problem = f"fusepy/libfuse2 missing: {exc}"
    if problem:
        if REQUIRE:
            pytest.fail(f"CKPTRESCUE_REQUIRE_PRIVILEGED=1 but {problem}")
        pytest.skip(problem)


@pytest.fixture(params=["s3", "az", "gs"])
def kit(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Kit:
    return make_kit(request.param, request, monkeypatch)


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    root = tmp_path_factory.mktemp("ckpts")
    intact = root / "intact"
    intact.mkdir()
    damaged = root / "damaged"
    damaged.mkdir()
    fs.torch_zip(intact / "model.pt")
    fs.safetensors_file(intact / "model.safetensors")
    fs.torch_zip(damaged / "model.pt")
    member = fs.damaged_tensor(damaged / "model.pt")
    return {"model.pt": intact / "model.pt", "model.safetensors": intact / "model.safetensors",
            "damaged.pt": damaged / "model.pt", "damaged_member": Path(member)}


@pytest.fixture
def proxy(motoserver: Any) -> Iterator[Any]:
    """A fault-injecting HTTP proxy on 127.0.0.1 in front of moto (``faultproxy.FaultProxy``)."""
    from faultproxy import FaultProxy

    with FaultProxy(motoserver.endpoint_url) as fault:
        yield fault
