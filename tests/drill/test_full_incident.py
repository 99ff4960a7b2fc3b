"""`make demo`'s path, for real: drill -> `playbook run full-incident --yes` -> report.

The answer and the report must match the faults the drill injected; the evidence (the drill's
disk image) hashes the same before and after; the malicious pickle never runs; everything the
drill and the run started is stopped (S3 server, loop devices, mounts).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import EXE


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def loops_backed_by(prefix: str) -> list[str]:
    out = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if prefix in line]


@pytest.mark.privileged
@pytest.mark.needs_tool("ddrescue", "mkfs.xfs", "xfs_db")
def test_drill_full_incident_report(tmp_path: Path) -> None:
    drill, case = tmp_path / "drill", tmp_path / "case"
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "drill", "AWS_SECRET_ACCESS_KEY": "drill"}
    built = subprocess.run([EXE, "drill", str(drill), "--json"], capture_output=True, text=True,
                           timeout=600, env=env)
    assert built.returncode == 0, built.stderr
    try:
        info = json.loads(built.stdout)
        images = json.loads((drill / "params.json").read_text())["image_dest"]  # this drill's
        kinds = {f["kind"] for f in info["faults"]}
        assert {"bit-flip", "truncated", "missing-shard", "nan-poison", "malicious-pickle",
                "bad-sectors", "s3-corrupted-version"} <= kinds
        image = Path(info["image"])
        before = sha256(image)
        run = subprocess.run([EXE, "playbook", "run", "full-incident", "--case", str(case),
                              "--yes", "-P", str(drill / "params.json"), "--json"],
                             capture_output=True, text=True, timeout=1200, env=env)
        assert run.returncode == 1, run.stderr  # done, problems found
        result = json.loads(run.stdout)
        answer = result["answer"]
        report = subprocess.run([EXE, "report", str(case), "--format", "json", "-o", "-"],
                                capture_output=True, text=True, timeout=120)
        model = json.loads(report.stdout)
    finally:
        subprocess.run([EXE, "drill", str(drill), "--stop"], capture_output=True, timeout=60)
    # evidence unchanged; the payload never ran; nothing left behind
    assert sha256(image) == before
    assert not Path(info["marker"]).exists()
    assert not loops_backed_by(str(tmp_path)) and not loops_backed_by(images)
    assert str(case) not in Path("/proc/mounts").read_text()
    assert not (drill / "s3server.json").exists()
    # the answer names what the drill injected
    assert answer.startswith("resume from step-300.pt")
    for needle in ("step-400.pt truncated", "step-200.pt damaged", "step-100.pt damaged",
                   "unsafe: step-350.pt (posix.system)", "hf-export incomplete",
                   "model.safetensors suspect", "bad sectors hit 1 tensor",
                   f"last known-good version {info['s3']['good_version']}"):
        assert needle in answer, (needle, answer)
    # the report: verdicts per checkpoint and the tensors the faults touched
    # ... each named by its evidence item and its path inside it, never by the mount point
    verdicts = {c["provenance"]["inner_path"]: c["verdict"] for c in model["checkpoints"]}
    assert {c["provenance"]["evidence_id"] for c in model["checkpoints"]} == {"E002"}
    assert all(c["path"].startswith("E002:run/") for c in model["checkpoints"])
    shown = json.dumps({k: v for k, v in model.items() if k not in (
        "commands", "refusals", "evidence", "manifest", "verification", "tool_versions")})
    assert "mnt-mount" not in shown and str(case) not in shown
    # the TUI's tree puts every probed checkpoint under its evidence item
    from ckptrescue.tui.viewmodel import group_checkpoints

    groups = group_checkpoints(model, [], [])
    placed = {c["path"] for g in groups if g.detail.get("id") == "E002" for c in g.checkpoints}
    assert len(placed) == len(model["checkpoints"]), [g.label for g in groups]
    # triage spoke only about the drill's volume: no writer elsewhere on the host is a finding
    assert not [f for sev in model["findings_by_severity"].values() for f in sev
                if f["code"] == "TR001"]
    # the case handed to other tools: CASE/UCO that the CASE project's validator accepts
    exported = tmp_path / "case.jsonld"
    assert subprocess.run([EXE, "report", str(case), "--format", "case-uco", "-o",
                           str(exported)], capture_output=True, timeout=600).returncode == 0
    validate = Path(sys.executable).with_name("case_validate")
    res = subprocess.run([str(validate), "--built-version", "case-1.5.0", str(exported)],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0 and "Conforms: True" in res.stdout, res.stdout[-2000:]
    expected = dict(info["expected"]["verdicts"])
    for rel, verdict in expected.items():
        match = [v for p, v in verdicts.items() if p == rel or p.startswith(rel + "/")]
        assert match == [verdict], (rel, verdicts)
    rows = {c["name"]: {r["name"] for r in c["rows"]} for c in model["checkpoints"]}
    faults = {f["path"]: f for f in info["faults"]}
    assert rows["step-200.pt"] == set(faults["run/step-200.pt"]["tensors"])
    assert rows["step-100.pt"] == set(faults["run/step-100.pt"]["tensors"])
    assert set(faults["run/step-400.pt"]["tensors"]) <= rows["step-400.pt"]
    if "run/tf/ckpt-2" in faults:  # the TensorFlow checkpoint, when tensorflow is installed
        assert rows["ckpt-2"] == set(faults["run/tf/ckpt-2"]["tensors"])
        assert "ckpt-2 damaged" in answer
    located = {t for r in model["locate"]["ranges"] for f in r["files"] for t in f["tensors"]}
    assert located == {"model.0.weight"}
    assert [list(r) for r in (model["bad_sector_map"]["ranges"] and
            [(b["start"], b["end"]) for b in model["bad_sector_map"]["ranges"]])] == \
        faults["run/step-100.pt"]["device_ranges"]
    assert model["verification"]["ok"]
    # the report fits on a few pages: the timeline keeps what bears on the incident (no boot
    # lines), the rest counted; `report -f pdf` prints it with headless Chromium in 1-20 pages
    timeline = model["timeline"]
    assert not [r for r in timeline["rows"] if "BIOS-e820" in r["text"] or "ACPI" in r["text"]]
    assert timeline["collected"] == timeline["shown_collected"] + timeline["collapsed_total"]
    if shutil.which("chromium"):
        pypdf = pytest.importorskip("pypdf")
        pdf = tmp_path / "report.pdf"
        printed = subprocess.run([EXE, "report", str(case), "-f", "pdf", "-o", str(pdf)],
                                 capture_output=True, text=True, timeout=300)
        assert printed.returncode == 0, printed.stderr
        pages = pypdf.PdfReader(str(pdf)).pages
        assert 1 <= len(pages) <= 20, len(pages)
        assert "page 1 of" in pages[0].extract_text()
    # the restored known-good version is byte-identical to the pristine checkpoint
    restored = list((case / "work" / "recovery").rglob("step-300.pt"))
    assert restored, "s3.restore wrote nothing"
    known = dict(line.split("  ", 1)[::-1] for line in
                 (drill / "known-good.sha256").read_text().splitlines())
    assert sha256(restored[0]) == known["run/step-300.pt"]


@pytest.mark.needs_tool("chromium")
@pytest.mark.privileged
def test_demo_report_html_in_chromium(tmp_path: Path) -> None:
    """The HTML report of a full drill run, opened in headless Chromium."""
    drill, case = tmp_path / "drill", tmp_path / "case"
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "drill", "AWS_SECRET_ACCESS_KEY": "drill"}
    subprocess.run([EXE, "drill", str(drill), "--no-s3"], check=True, capture_output=True,
                   timeout=600, env=env)
    try:
        params = json.loads((drill / "params.json").read_text())
        subprocess.run([EXE, "playbook", "run", "full-incident", "--case", str(case), "--yes",
                        *[f"-p{k}={v}" for k, v in params.items()]],
                       capture_output=True, text=True, timeout=1200, env=env)
    finally:
        subprocess.run([EXE, "drill", str(drill), "--stop"], capture_output=True, timeout=60)
    html = case / "report.html"
    assert html.exists()
    chromium = shutil.which("chromium")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'chrome'}"]
    dom = subprocess.run([chromium, *flags, "--dump-dom", html.as_uri()], capture_output=True,
                         text=True, timeout=120).stdout
    assert "resume from step-300.pt" in dom
    assert 'data-testid="bad-sector-map"' in dom and "model.0.weight" in dom
    assert 'data-testid="checkpoints"' in dom and "posix.system" in dom
    png = tmp_path / "report.png"
    subprocess.run([chromium, *flags, f"--screenshot={png}", "--window-size=1200,3000",
                    html.as_uri()], capture_output=True, timeout=120, check=False)
    assert png.stat().st_size > 20_000


@pytest.mark.privileged
@pytest.mark.needs_tool("make", "ddrescue", "mkfs.xfs")
def test_make_demo(tmp_path: Path) -> None:
    """`make demo` itself: exit 0, the one-line answer, the report's path; nothing left running."""
    repo = Path(__file__).resolve().parents[2]
    out = tmp_path / "demo"
    res = subprocess.run(["make", "-s", "-C", str(repo), "demo", f"DEMO_DIR={out}"],
                         capture_output=True, text=True, timeout=1500)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.strip().splitlines()
    assert lines[-1].startswith("report: ") and Path(lines[-1][8:]).is_file()
    answer = next(line for line in lines if line.startswith("answer: "))
    assert answer.startswith("answer: resume from step-300.pt")
    assert "unsafe: step-350.pt (posix.system)" in answer
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert f"ckptrescue.drill.s3daemon {out}" not in ps
    assert not loops_backed_by(str(out)) and str(out) not in Path("/proc/mounts").read_text()
