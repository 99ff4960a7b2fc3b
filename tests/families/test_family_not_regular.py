"""A FIFO, a device or a symlink loop in place of a rank file: the probe never opens it (an open of
a FIFO blocks until a writer comes; ``/dev/zero`` reads without end), names it (IO002) and calls
the step not intact. Each case runs ``probe``/``rank`` in a child process under a time limit, so a
regression shows as a timeout, not a hung test run. Steps are the real engines' own
(``fixtures/families``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from f1_build import REPO, built, copy

PROBE = """
import json, sys
from pathlib import Path
from ckptrescue.checkpoints.probes.checkpoints import probe_paths
from ckptrescue.checkpoints.rank import rank
out = []
for r in probe_paths([Path(p) for p in sys.argv[2:]]):
    fam = r.extra.get("family") or {}
    out.append({"path": r.path, "verdict": str(r.verdict), "codes": sorted({f.code for f in
                r.findings}), "ranks": fam.get("ranks"), "titles": [f.title for f in r.findings
                if f.code == "IO002"]})
ranked = rank(Path(sys.argv[1])) if sys.argv[1] != "-" else None
res = {"probe": out}
if ranked is not None:
    res["recommended"] = ranked.resume_from
print("RESULT" + json.dumps(res))
"""


def run_probe(run_dir: Path | None, *paths: Path) -> dict:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO),
           "HOME": os.environ.get("HOME", "/tmp")}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(run_dir or "-"), *map(str, paths)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT")), None)
    assert line is not None, proc.stderr[-3000:]
    return json.loads(line[len("RESULT"):])


@pytest.fixture(scope="module")
def ds() -> Path:
    pytest.importorskip("deepspeed")
    return built("deepspeed")


@pytest.fixture(scope="module")
def mg() -> Path:
    pytest.importorskip("megatron.core")
    return built("megatron")


def fifo_in_place(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


@pytest.mark.parametrize(("run", "victim"), [
    ("zero2", "zero_pp_rank_1_mp_rank_00_optim_states.pt"),
    ("zero2", "mp_rank_00_model_states.pt"),  # the file the layout reads its metadata from
    ("zero3", "zero_pp_rank_0_mp_rank_00_model_states.pt"),
])
def test_fifo_rank_file_deepspeed(ds: Path, tmp_path: Path, run: str, victim: str) -> None:
    run_dir = copy(ds / run, tmp_path / run)
    fifo_in_place(run_dir / "global_step3" / victim)
    res = run_probe(run_dir, run_dir / "global_step3")
    (step,) = res["probe"]
    assert step["verdict"] in ("damaged", "unreadable", "incomplete"), step
    assert "IO002" in step["codes"], step
    assert "a FIFO" in step["titles"][0]
    label = victim.removesuffix("_optim_states.pt").removesuffix("_model_states.pt")
    assert step["ranks"][label] != "intact"
    # the run's recommendation moves to an older step, never the one with the FIFO
    assert res["recommended"] is None or "global_step3" not in res["recommended"]


def test_fifo_and_device_in_megatron(mg: Path, tmp_path: Path) -> None:
    run_dir = copy(mg / "legacy", tmp_path / "legacy")
    step = sorted(p for p in run_dir.iterdir() if p.name.startswith("iter_"))[-1]
    fifo_in_place(step / "mp_rank_00_000" / "model_optim_rng.pt")
    dev = step / "mp_rank_01_001" / "model_optim_rng.pt"
    dev.unlink()
    dev.symlink_to("/dev/zero")
    res = run_probe(run_dir, step)
    (rep,) = res["probe"]
    assert rep["verdict"] != "intact" and "IO002" in rep["codes"], rep
    kinds = " ".join(rep["titles"])
    assert "a FIFO" in kinds and "a character device" in kinds
    assert rep["ranks"]["mp_rank_00_000"] != "intact"
    assert rep["ranks"]["mp_rank_01_001"] != "intact"
    assert res["recommended"] is None or step.name not in res["recommended"]


def test_fifo_metadata_json_megatron_dist(mg: Path, tmp_path: Path) -> None:
    run_dir = copy(mg / "dist", tmp_path / "dist")
    step = sorted(p for p in run_dir.iterdir() if p.name.startswith("iter_"))[-1]
    fifo_in_place(step / "metadata.json")
    fifo_in_place(step / "common.pt")
    res = run_probe(None, step)
    assert all(r["verdict"] != "intact" for r in res["probe"]), res


def test_fifo_named_like_a_checkpoint_in_a_run(tmp_path: Path) -> None:
    """A FIFO named like a checkpoint in a run directory is reported, not skipped, not opened."""
    os.mkfifo(tmp_path / "step-100.pt")
    res = run_probe(None, tmp_path)
    by_name = {Path(r["path"]).name: r for r in res["probe"]}
    assert by_name["step-100.pt"]["codes"] == ["IO002"]
    assert by_name["step-100.pt"]["verdict"] == "unreadable"
