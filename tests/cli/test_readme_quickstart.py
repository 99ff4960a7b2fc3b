"""The README's quick start, run as printed (#30): the by-hand block under "Quick start" is read
from README.md and its lines run verbatim, in one shell, in a fresh directory, with the
installed console script on PATH. Each command ends as the README says (the playbook with 1:
done, problems found); the drill prints exactly the README's next command; the playbook ends
with the case's and the report's paths, naming checkpoints by evidence (``E002:run/…``), never
by the mount it released; `report CASE` writes CASE/report.html and prints its path; the
evidence image hashes the same before and after; nothing is left mounted, attached or running.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def quickstart_block() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    block = next(b for b in blocks if "ckptrescue drill" in b)
    return [line for line in block.splitlines() if line.strip()]


def command_of(line: str) -> str:
    """The command of a README line, without its trailing comment."""
    return re.split(r"\s+#\s", line, maxsplit=1)[0].strip()


VERSION = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b|"
                     r"\b[0-9a-f]{4}…")


def readme_answer() -> str:
    """The answer the README shows ("The answer looks like:"), as one line."""
    text = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    return text.split("The answer looks like:", 1)[1].split("```", 2)[1].strip()


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def test_the_block_is_what_a_responder_types() -> None:
    lines = quickstart_block()
    kinds = [command_of(line).split()[:3] for line in lines]
    assert kinds[0][0] == "export" and all(k[0] == "ckptrescue" for k in kinds[1:]), kinds
    assert ["ckptrescue", "playbook", "run"] in kinds and ["ckptrescue", "report"] in \
        [k[:2] for k in kinds]


@pytest.mark.slow
@pytest.mark.privileged
@pytest.mark.needs_tool("ddrescue", "mkfs.xfs", "xfs_db")
def test_readme_quickstart_runs_as_printed(tmp_path: Path) -> None:
    lines = quickstart_block()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    script = []
    for i, line in enumerate(lines):
        script.append(line)
        script.append(f'echo "@@ {i} rc=$?" >&2')
        if command_of(line).startswith("ckptrescue drill") and "--stop" not in line:
            # the evidence, hashed right after it exists (not a command of the README)
            script.append("sha256sum demo-out/drill/disk.img >&2 || true")
    drill = tmp_path / "demo-out" / "drill"
    try:
        res = subprocess.run(["bash", "-c", "\n".join(script)], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=1800,
                             stdin=subprocess.DEVNULL)
    finally:
        subprocess.run([str(BIN / "ckptrescue"), "drill", str(drill), "--stop"],
                       capture_output=True, timeout=120)
    codes = {int(i): int(rc) for i, rc in re.findall(r"^@@ (\d+) rc=(\d+)$", res.stderr, re.M)}
    expected = {i: (1 if command_of(line).startswith("ckptrescue playbook run") else 0)
                for i, line in enumerate(lines)}
    assert codes == expected, (codes, res.stdout[-3000:], res.stderr[-3000:])
    # the drill printed the README's next command exactly
    playbook = next(command_of(line) for line in lines if "playbook run" in line)
    assert f"  {playbook}\n" in res.stdout
    # the playbook's closing lines: the answer, the case, the report; evidence-relative names
    assert "answer: resume from step-300.pt" in res.stdout
    # ... and it is the answer the README shows (object versions aside)
    printed = re.search(r"^answer: (.*)$", res.stdout, re.M)
    assert printed and VERSION.sub("V", printed.group(1)) == VERSION.sub("V", readme_answer()), \
        printed.group(1) if printed else res.stdout[-2000:]
    case = drill / "case"
    assert f"case:   {case}\n" in res.stdout
    assert f"report: {case / 'report.html'}\n" in res.stdout
    assert "resume from: E002:run/step-300.pt" in res.stdout
    assert "[critical] PK001 E002:run/step-350.pt: " in res.stdout
    transcript = res.stdout.split("-> probe", 1)[1]
    assert "mnt-mount/run" not in transcript, "a path under the released mount was printed"
    # `report CASE` wrote CASE/report.html and printed its path (alone, on stdout)
    assert f"\n{case / 'report.html'}\n" in res.stdout
    assert "resume from step-300.pt" in (case / "report.html").read_text()
    # the evidence did not change; nothing left behind
    before = re.search(r"^([0-9a-f]{64})  demo-out/drill/disk.img$", res.stderr, re.M)
    assert before and sha256(drill / "disk.img") == before.group(1)
    losetup = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert str(tmp_path) not in losetup and str(tmp_path) not in Path("/proc/mounts").read_text()
    assert not (drill / "s3server.json").exists()
