"""`probe --load` on a run of TensorFlow checkpoints: one sandboxed TensorFlow child for all of
them, TensorFlow's own outcome recorded per checkpoint."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from cli_helpers import EXE


def test_one_tensorflow_child_for_the_whole_run(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "ckptrescue.drill.tfrun", str(tmp_path / "run")],
                   check=True, capture_output=True, timeout=300)
    case = tmp_path / "case"
    subprocess.run([EXE, "case", "new", str(case)], check=True, capture_output=True)
    res = subprocess.run([EXE, "probe", str(tmp_path / "run"), "--load", "--json",
                          "--case", str(case)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    loads = {Path(c["path"]).name: c["load"] for c in json.loads(res.stdout)["checkpoints"]}
    assert set(loads) == {"ckpt-1", "ckpt-2"}
    for outcome in loads.values():
        assert outcome["status"] == "ok" and outcome["loader"] == "tensorflow"
        assert outcome["result"]["read_ok"] == outcome["result"]["variables"] > 0
    records = [json.loads(line) for line in (case / "audit.jsonl").read_text().splitlines()]
    children = [r for r in records if r["action"] == "sandbox.run"
                and r["details"]["purpose"] == "sandbox:tf_load"]
    assert len(children) == 1
