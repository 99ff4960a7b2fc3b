"""``playbook run`` without ``--case`` (#30): like every other command it makes a case of its
own; unlike a one-step command it keeps it, private (0700, under $TMPDIR), and ends with its
path and the report's; the transcript is on stdout, so ``> log`` keeps it."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cli_helpers import run_cli  # noqa: E402

BOOK = """\
schema: 1
name: list-and-report
parameters:
  - {name: target, type: directory}
steps:
  - id: listing
    action: exec
    with: {argv: [ls, $target]}
  - id: report
    action: report
"""


def test_a_run_without_case_keeps_a_private_case_and_says_where(tmp_path: Path) -> None:
    book = tmp_path / "book.yaml"
    book.write_text(BOOK)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    (tmp_path / "data").mkdir()
    res = run_cli("playbook", "run", str(book), "-p", f"target={tmp_path / 'data'}",
                  env_extra={"TMPDIR": str(scratch)})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert lines[-2].startswith("case:   ") and lines[-1].startswith("report: "), lines[-3:]
    case = Path(lines[-2].split(None, 1)[1])
    report = Path(lines[-1].split(None, 1)[1])
    assert case.parent.parent == scratch and (case / "case.json").is_file()
    assert stat.S_IMODE(os.stat(case.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(case).st_mode) == 0o700
    assert report == case / "report.html" and report.is_file()
    assert "-> listing [exec]" in res.stdout  # the transcript is the result: stdout
    assert f"case: {case} (a new private case" in res.stderr  # said when it starts
    # the printed path is a case the next command records into
    again = run_cli("playbook", "run", str(book), "-p", f"target={tmp_path / 'data'}",
                    "--case", str(case))
    assert again.returncode == 0, again.stderr
    assert f"case:   {case}" in again.stdout and "private" not in again.stderr
    from ckptrescue.record.case import Case

    assert len(list(Case.open(case).records("run.started"))) == 2
