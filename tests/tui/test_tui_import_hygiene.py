"""Textual only when the TUI starts; torch/TensorFlow/boto3 not even then (only in the steps
that need them). Checked in fresh interpreters."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys
from pathlib import Path
from ckptrescue.record.case import Case
from ckptrescue.tui.app import make_app
app = make_app(Case.create(Path(sys.argv[1]), title="hygiene"))
seen = {}
async def go(pilot):
    await pilot.pause()
    await pilot.press("down", "enter")          # corrupted checkpoint -> parameters
    await pilot.pause()
    pilot.app.screen.query_one("#p-run_dir").value = sys.argv[2]
    await pilot.press("f5")                      # plan preview (engine.dry_run)
    await pilot.pause()
    seen["screen"] = type(pilot.app.screen).__name__
    seen["heavy"] = sorted(m for m in ("torch", "tensorflow", "boto3", "pyarrow", "dask")
                           if m in sys.modules)
    pilot.app.exit()
app.run(headless=True, auto_pilot=go, size=(80, 24))
print(json.dumps(seen))
"""


def test_cli_does_not_import_textual() -> None:
    code = ("import sys, ckptrescue.cli.main; "
            "print(sorted(m for m in ('textual', 'torch', 'tensorflow') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def test_tui_to_plan_preview_without_heavy_imports(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "case"), str(tmp_path)],
                         capture_output=True, text=True, timeout=120,
                         env={"XDG_STATE_HOME": str(tmp_path / "state"), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr[-2000:]
    seen = json.loads(res.stdout.strip().splitlines()[-1])
    assert seen == {"screen": "PlanScreen", "heavy": []}
