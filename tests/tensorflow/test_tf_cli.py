"""``ckptrescue probe`` / ``rank`` / ``salvage`` on a TF run directory, end to end."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from cli_helpers import run_cli

from fixtures import tensorflow as tfx


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, timeout=300)


def test_probe_rank_salvage_cli(copy_of, tmp_path: Path) -> None:
    d = copy_of("run")
    size = (d / "ckpt-2.data-00000-of-00001").stat().st_size
    tfx.flip(d / "ckpt-2.data-00000-of-00001", size // 3)
    before = tfx.tree_hashes(d)

    probe = cli("probe", str(d), "--json")
    assert probe.returncode == 1, probe.stderr
    data = json.loads(probe.stdout)
    by = {Path(c["path"]).name: c for c in data["checkpoints"]}
    assert by["ckpt-1"]["verdict"] == "intact" and by["ckpt-2"]["verdict"] == "damaged"
    assert len(by["ckpt-2"]["damaged_tensors"]) == 1
    assert by["ckpt-2"]["findings"][0]["code"] == "TB002"

    rank = cli("rank", str(d), "--json")
    ranked = json.loads(rank.stdout)
    assert [Path(c["path"]).name for c in ranked["checkpoints"]] == ["ckpt-2", "ckpt-1"]
    assert Path(ranked["resume_from"]).name == "ckpt-1"

    out = tmp_path / "recovered"
    case = tmp_path / "case"
    assert cli("case", "new", str(case)).returncode == 0
    assert cli("probe", str(d), "--case", str(case)).returncode == 1
    sal = cli("salvage", str(d / "ckpt-2.index"), str(out), "--case", str(case))
    assert sal.returncode in (0, 1), sal.stderr
    report = json.loads((out / "salvage.json").read_text())
    assert [x["name"] for x in report["lost"]] == by["ckpt-2"]["damaged_tensors"]
    # the answer counts what the table shows: the object graph (not storable in
    # safetensors) is not a lost tensor (issue 28)
    from ckptrescue.engine.answer import answer_line
    from ckptrescue.record.case import Case

    assert "ckpt-2 damaged: 1 tensor lost" in answer_line(Case.open(case))
    assert tfx.tree_hashes(d) == before  # nothing the kit did changed the evidence


def test_probe_intact_exit_zero(tf_originals: Path) -> None:
    res = cli("probe", str(tf_originals / "sharded"), "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    (ck,) = json.loads(res.stdout)["checkpoints"]
    assert ck["format"] == "tf-tensorbundle" and ck["verdict"] == "intact"
