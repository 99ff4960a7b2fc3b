"""CLI adapters (probe/salvage/rank: JSON shapes, exit codes, case recording) and the
sandboxed real load (--load). Fixtures: real torch/safetensors saves; damage on copies."""

from __future__ import annotations

import json

from cli_helpers import run_cli

from ckptrescue.checkpoints.base import Verdict
from fixtures import checkpoints as fx

from .conftest import probe1, tree_hash


def cli(*args, timeout=180):
    res = run_cli(*args, timeout=timeout, clean_env=True)
    return res.returncode, res.stdout, res.stderr


def test_probe_json_shape_and_exit_codes(base, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    fx.copy(base["zip"], run / "a.pt")
    code, out, _ = cli("probe", "--json", str(run))
    assert code == 0
    data = json.loads(out)
    ck = data["checkpoints"][0]
    assert set(ck) >= {"path", "format", "verdict", "tensors_total", "damaged_tensors",
                       "suspect_tensors", "missing_tensors", "findings"}
    assert ck["verdict"] == "intact" and ck["tensors_total"] == len(base["flat"])
    bad = fx.copy(base["zip"], run / "b.pt")
    off, _ = fx.zip_data_offset(bad, fx.zip_member(bad, "data/0"))
    fx.flip_bit(bad, off, 0)
    before = tree_hash(run)
    code, out, _ = cli("probe", "--json", "--tensors", str(run))
    assert code == 1
    by = {c["path"]: c for c in json.loads(out)["checkpoints"]}
    b = by[str(bad)]
    assert b["verdict"] == "damaged" and b["damaged_tensors"] == ["model.0.weight"]
    f = next(f for f in b["findings"] if f["code"] == "TZ002")
    assert {"code", "severity", "title", "offset", "length"} <= set(f)
    t = next(t for t in b["tensors"] if t["name"] == "model.0.weight")
    assert t["file"] == str(bad) and t["offset"] == off and t["status"] == "damaged"
    assert tree_hash(run) == before


def test_rank_and_salvage_cli(base, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    fx.copy(base["zip"], run / "step_1.pt")
    code, out, _ = cli("rank", "--json", str(run))
    assert code == 0
    assert json.loads(out)["resume_from"] == str(run / "step_1.pt")
    code, out, _ = cli("salvage", "--json", str(run / "step_1.pt"), str(tmp_path / "out"))
    assert code == 0 and json.loads(out)["lost"] == []
    code, _, err = cli("salvage", str(run / "step_1.pt"), str(run / "x"))
    assert code == 3 and "next to" in err and "Traceback" not in err
    code, _, err = cli("probe", str(tmp_path / "nope.pt"))
    assert code == 2 and "no such file" in err


def test_probe_records_in_case(base, case, tmp_path):
    """The probe writes nothing itself; its records, recorded by the engine's one writer, are
    the start, each finding and each checkpoint's summary."""
    from ckptrescue.checkpoints.probes.checkpoints import probe_paths, probe_records
    from ckptrescue.engine.action import ActionResult
    from ckptrescue.engine.executor import record

    bad = fx.copy(base["zip"], tmp_path / "c.pt")
    off, _ = fx.zip_data_offset(bad, fx.zip_member(bad, "data/2"))
    fx.flip_bit(bad, off, 0)
    reports = probe_paths([bad], case=case)
    assert [r["action"] for r in case.records()] == ["case.created"]  # nothing written
    record(case, ActionResult(audit=probe_records([bad], reports), findings_recorded=True))
    actions = [r["action"] for r in case.records()]
    assert "checkpoint.probe.started" in actions and "checkpoint.probed" in actions
    assert any(f.code == "TZ002" and f.tensors == ("model.1.weight",) for f in case.findings())
    assert case.verify().ok


def test_load_in_sandbox(base, tmp_path):
    r = probe1(base["zip"], load=True)
    assert r.load["status"] == "ok" and r.load["result"]["tensors"] == len(base["flat"])
    # torch.load checks no CRC: a flipped payload loads "fine" — the probe says damaged
    bad = fx.copy(base["zip"], tmp_path / "flip.pt")
    off, _ = fx.zip_data_offset(bad, fx.zip_member(bad, "data/0"))
    fx.flip_bit(bad, off + 3, 6)
    r = probe1(bad, load=True)
    assert r.verdict is Verdict.DAMAGED
    assert r.load["status"] == "ok" and "LD001" in [f.code for f in r.findings]
    # a truncated archive is never handed to torch
    cut = fx.copy(base["zip"], tmp_path / "cut.pt")
    fx.truncate(cut, 3000)
    r = probe1(cut, load=True)
    assert r.load["status"] == "skipped"


def test_load_dcp_and_safetensors_in_sandbox(base):
    r = probe1(base["dcp"], load=True)
    assert r.load["status"] == "ok", r.load
    r = probe1(base["safetensors"], load=True)
    assert r.load["status"] == "ok" and r.load["result"]["tensors"] == r.tensors_total
    r = probe1(base["hf_bin"], load=True)
    assert r.load["status"] == "ok" and r.load["result"]["tensors"] == r.tensors_total


def test_load_crash_is_a_finding(base, tmp_path, monkeypatch):
    from ckptrescue.checkpoints.probes import checkpoint_load

    r = probe1(base["safetensors"])
    checkpoint_load.load_in_sandbox(r, memory_mb=64, timeout_s=60)  # torch cannot even start
    assert r.load["status"] in {"killed", "crashed", "error"}
    assert any(f.code in {"LD002", "LD003"} for f in r.findings)
