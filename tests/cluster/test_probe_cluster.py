"""`probe --scheduler`: a real LocalCluster with two worker processes gives the same reports as
a local run, on real torch checkpoints (one of them damaged)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cli_helpers import EXE


@pytest.fixture(scope="module")
def cluster():  # noqa: ANN201
    distributed = pytest.importorskip("distributed")
    lc = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, silence_logs=40)
    try:
        yield lc.scheduler_address
    finally:
        lc.close()


def test_probe_on_cluster_equals_local(tmp_path: Path, cluster: str) -> None:
    torch = pytest.importorskip("torch")
    from fixtures.checkpoints import exact_tensor

    run = tmp_path / "run"
    run.mkdir()
    for step in (10, 20, 30):
        torch.save({"model": {"w": exact_tensor(32, 32, seed=step), "b": torch.zeros(32)},
                    "step": step}, run / f"step-{step}.pt")
    data = bytearray((run / "step-20.pt").read_bytes())
    data[len(data) // 2] ^= 0x40
    (run / "step-20.pt").write_bytes(bytes(data))
    local = subprocess.run([EXE, "probe", str(run), "--json"], capture_output=True, text=True)
    remote = subprocess.run([EXE, "probe", str(run), "--json", "--scheduler", cluster],
                            capture_output=True, text=True)
    assert remote.returncode == local.returncode == 1, remote.stderr
    assert json.loads(remote.stdout) == json.loads(local.stdout)
    verdicts = {Path(c["path"]).name: c["verdict"]
                for c in json.loads(remote.stdout)["checkpoints"]}
    assert verdicts["step-20.pt"] == "damaged" and verdicts["step-30.pt"] == "intact"


def test_unreachable_scheduler_is_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "x.pt").write_bytes(b"not a checkpoint")
    res = subprocess.run([EXE, "probe", str(tmp_path), "--scheduler", "tcp://127.0.0.1:1"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 4 and "Traceback" not in res.stderr
    assert "cannot reach the Dask scheduler" in res.stderr
    assert "connection refused" in res.stderr  # said at once, not after the client's timeout
