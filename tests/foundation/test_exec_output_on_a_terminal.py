"""``exec`` shows a tool's output; on a terminal, the names in it are shown, never obeyed.

``exec --case C -- ls EVIDENCE_DIR`` runs ls with its stdout on a pipe, so ls prints the names
raw; the kit then replays that output. A name holding an OSC 52 clipboard write and a screen
clear must reach the responder's terminal as visible text (``\\x1b``), while a pipe still gets
the tool's exact bytes (the artifact holds them either way)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
from pathlib import Path

from ckptrescue.record.case import Case

CLI = str(Path(sys.executable).with_name("ckptrescue"))
REPO = Path(__file__).resolve().parents[2]
EVIL = "evil\x1b]52;c;SGVsbG8=\x07\x1b[2J\u202e.pt"


def _run_on_a_terminal(argv: list[str]) -> bytes:
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                            env=env, close_fds=True)
    os.close(slave)
    out = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 120)
            if not ready:
                break
            try:
                block = os.read(master, 65536)
            except OSError:  # EIO: the other side closed
                break
            if not block:
                break
            out += block
    finally:
        proc.wait(timeout=120)
        os.close(master)
    return out


def test_exec_output_on_a_terminal_shows_names_inert(tmp_path: Path) -> None:
    evidence = tmp_path / "ev"
    evidence.mkdir()
    (evidence / EVIL).write_bytes(b"weights")
    case = Case.create(tmp_path / "case", title="names on a terminal")
    case.ensure_evidence(evidence, how="test evidence")
    argv = [CLI, "exec", "--case", str(case.root), "--", "ls", str(evidence)]
    screen = _run_on_a_terminal(argv)
    assert b"evil" in screen, screen
    assert b"\x1b" not in screen and b"\x07" not in screen, screen
    assert b"\\x1b]52;c;SGVsbG8=\\x07\\x1b[2J\\u202e.pt" in screen
    # into a pipe: the tool's own bytes, as the artifact holds them
    piped = subprocess.run(argv, capture_output=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
    assert piped.stdout == EVIL.encode() + b"\n"
