"""The drill incident, driven through the TUI: "Disk or node failure" -> full-incident -> the
imaging gate answered in the modal -> run -> findings tree -> report.

Root and loop devices are needed (the playbook mounts the image read-only). The answer and the
per-checkpoint verdicts must be the ones the drill injected (the same the CLI reaches in
tests/drill/test_full_incident.py); the disk image hashes the same before and after; the drill's
S3 server is stopped and no loop device or mount is left, even on failure.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
from cli_helpers import EXE
from tui_testlib import drive, screen_text, tree_labels, wait_for

from ckptrescue.engine.answer import answer_line, latest_checkpoints
from ckptrescue.record.case import Case


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


@pytest.mark.privileged
@pytest.mark.needs_tool("ddrescue", "mkfs.xfs", "xfs_db")
def test_drill_full_incident_in_the_tui(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from textual.widgets import Input, Tree

    from ckptrescue.tui.app import make_app
    from ckptrescue.tui.screens.findings import FindingsScreen
    from ckptrescue.tui.screens.gate import GateModal
    from ckptrescue.tui.screens.params import ParamsScreen
    from ckptrescue.tui.screens.plan import PlanScreen
    from ckptrescue.tui.screens.run import RunScreen

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "drill")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "drill")
    drill, case_dir = tmp_path / "drill", tmp_path / "case"
    built = subprocess.run([EXE, "drill", str(drill), "--json"], capture_output=True, text=True,
                           timeout=600)
    seen: dict[str, object] = {}
    try:
        assert built.returncode == 0, built.stderr
        info = json.loads(built.stdout)
        image = Path(info["image"])
        before = sha256(image)
        params = json.loads((drill / "params.json").read_text())
        app = make_app(Case.create(case_dir, title="drill", examiner="pytest"))

        async def script(pilot) -> None:
            await pilot.pause()
            await pilot.press("enter")  # "Disk or node failure" is the first proposal
            await wait_for(pilot, lambda: isinstance(app.screen, ParamsScreen), 10, "params")
            assert app.screen.playbook.name == "full-incident"
            for name, value in params.items():
                app.screen.query_one(f"#p-{name}", Input).value = str(value)
            await pilot.pause()
            await pilot.press("f5")
            await wait_for(pilot, lambda: isinstance(app.screen, PlanScreen), 10, "plan")
            ddrescue = [line for line in screen_text(app).splitlines()
                        if line.strip().startswith("$ ddrescue")]
            assert ddrescue and all(f"-H {params['simulate_bad_map']} {params['source']}" in line
                                    for line in ddrescue), ddrescue
            await pilot.press("g")
            await pilot.pause()
            await pilot.press("y")
            await wait_for(pilot, lambda: isinstance(app.screen, RunScreen), 10, "run")
            run = app.screen
            await wait_for(pilot, lambda: isinstance(app.screen, GateModal), 300, "image gate")
            assert app.screen.prompt.startswith(f"Image {params['source']} into")
            await pilot.press("y")
            await wait_for(pilot, lambda: run.final is not None, 900, "the run")
            seen["final"] = run.final
            await pilot.press("f7")
            await wait_for(pilot, lambda: isinstance(app.screen, FindingsScreen)
                           and app.screen.model is not None, 120, "findings")
            seen["tree"] = tree_labels(app.screen.query_one(Tree))
            await pilot.press("m")
            await pilot.pause()
            seen["map"] = screen_text(app)
            await pilot.press("ctrl+q")

        drive(app, script)
    finally:
        subprocess.run([EXE, "drill", str(drill), "--stop"], capture_output=True, timeout=60)
        mounted = [line for line in Path("/proc/mounts").read_text().splitlines()
                   if str(case_dir) in line]
        for line in mounted:  # never leave a mount behind, even when the run broke
            subprocess.run(["umount", line.split()[1]], capture_output=True, timeout=60)
    assert not mounted, mounted
    assert sha256(image) == before
    assert not Path(info["marker"]).exists(), "the malicious pickle must never run"
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert str(tmp_path) not in loops
    case = Case.open(case_dir)
    final = seen["final"]
    assert final.status == "findings"
    assert final.answer == answer_line(case)
    assert final.answer.startswith("resume from step-300.pt")
    for needle in ("step-400.pt truncated", "step-200.pt damaged", "step-100.pt damaged",
                   "unsafe: step-350.pt (posix.system)", "hf-export incomplete",
                   "bad sectors hit 1 tensor",
                   f"last known-good version {info['s3']['good_version']}"):
        assert needle in final.answer, (needle, final.answer)
    verdicts = {p.split("/mnt-mount/")[1]: c.verdict
                for p, c in latest_checkpoints(case).items()}
    labels = seen["tree"]
    for rel, verdict in info["expected"]["verdicts"].items():
        match = [v for p, v in verdicts.items() if p == rel or p.startswith(rel + "/")]
        assert match == [verdict], (rel, verdicts)
        assert any(rel in label and f"[{verdict}]" in label for label in labels), (rel, labels)
    assert any(label.startswith("E002 image") for label in labels), labels
    faults = {f["path"]: f for f in info["faults"]}
    start, end = faults["run/step-100.pt"]["device_ranges"][0]
    assert f"#1 [{start}, {end})" in seen["map"]
    assert "run/step-100.pt: model.0.weight" in seen["map"]
