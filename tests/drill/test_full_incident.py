"""`make demo` itself, for real, run once for the module: drill -> `playbook run full-incident
--yes` -> report, as a user runs it.

The answer and the report must match the faults the drill injected; the evidence (the drill's
disk image) hashes as the drill built it; the malicious pickle never runs; everything the drill
and the run started is stopped (S3 server, loop devices, mounts); the HTML report opens in
headless Chromium and prints to a PDF of at most 20 pages.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import case_validator
import pytest
from cli_helpers import EXE

# one `make demo` serves every test here: they run on one worker, the one of every privileged
# test (the "kernel" group, tests/conftest.py)
pytestmark = [pytest.mark.privileged, pytest.mark.needs_tool("make", "ddrescue", "mkfs.xfs")]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def loops_backed_by(prefix: str) -> list[str]:
    out = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if prefix in line]


@dataclass
class Demo:
    out: Path
    res: subprocess.CompletedProcess[str]

    @property
    def info(self) -> dict:
        return json.loads((self.out / "drill" / "drill.json").read_text())

    @property
    def answer(self) -> str:
        return next(line for line in self.res.stdout.splitlines()
                    if line.startswith("answer: "))[len("answer: "):]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    repo = Path(__file__).resolve().parents[2]
    out = tmp_path_factory.mktemp("make-demo") / "demo"
    res = subprocess.run(["make", "-s", "-C", str(repo), "demo", f"DEMO_DIR={out}"],
                         capture_output=True, text=True, timeout=1500)
    return Demo(out, res)


def test_make_demo(demo: Demo) -> None:
    """`make demo` itself: exit 0, the one-line answer, the report's path; nothing left running."""
    assert demo.res.returncode == 0, demo.res.stderr[-3000:]
    lines = demo.res.stdout.strip().splitlines()
    assert lines[-1].startswith("report: ") and Path(lines[-1][8:]).is_file()
    assert demo.answer.startswith("resume from step-300.pt")
    assert "unsafe: step-350.pt (posix.system)" in demo.answer
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert f"ckptrescue.drill.s3daemon {demo.out}" not in ps
    images = json.loads((demo.out / "drill" / "params.json").read_text())["image_dest"]
    assert not loops_backed_by(str(demo.out)) and not loops_backed_by(images)
    assert str(demo.out) not in Path("/proc/mounts").read_text()
    assert not (demo.out / "drill" / "s3server.json").exists()


@pytest.mark.needs_tool("xfs_db")
def test_drill_full_incident_report(demo: Demo, tmp_path: Path) -> None:
    assert demo.res.returncode == 0, demo.res.stderr[-3000:]
    info, answer, case = demo.info, demo.answer, demo.out / "case"
    model = json.loads(subprocess.run([EXE, "report", str(case), "--format", "json", "-o", "-"],
                                      capture_output=True, text=True, timeout=120).stdout)
    # evidence unchanged since the drill built it; the payload never ran
    assert sha256(Path(info["image"])) == info["image_sha256"]
    assert not Path(info["marker"]).exists()
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
    res = case_validator.validate(exported, timeout=900)
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
                 (demo.out / "drill" / "known-good.sha256").read_text().splitlines())
    assert sha256(restored[0]) == known["run/step-300.pt"]


@pytest.mark.needs_tool("chromium")
def test_demo_report_html_in_chromium(demo: Demo, tmp_path: Path) -> None:
    """The HTML report `make demo` wrote, opened in headless Chromium."""
    assert demo.res.returncode == 0, demo.res.stderr[-3000:]
    html = demo.out / "report.html"
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
