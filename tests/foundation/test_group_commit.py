"""Group commit of the audit log: records written in batches, synced once per step or second;
a real SIGKILL loses at most what was not yet written and never breaks the chain; a real full
filesystem (a tiny tmpfs) cuts a write short, which verify calls a torn tail, not tampering."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import run_cli

from ckptrescue.record.audit import CaseWriteError
from ckptrescue.record.case import Case
from fixtures.storage import fill


def _on_disk(case: Case) -> list[str]:
    return [json.loads(x)["action"] for x in case.audit.path.read_bytes().splitlines()
            if x.startswith(b"{")]


def test_records_wait_for_the_commit_and_durable_ones_do_not(tmp_path: Path) -> None:
    case = Case.create(tmp_path / "c")
    with case.writer():
        for i in range(200):
            case.log("bulk", {"i": i})
        assert _on_disk(case).count("bulk") == 0  # chained in memory, not yet written
        assert [r["details"]["i"] for r in case.records("bulk")][-1] == 199  # readers see them
        case.log("safety.attached", {"kind": "loop", "name": "/dev/loop9"})  # durable
        on_disk = _on_disk(case)
        assert on_disk[-1] == "safety.attached" and on_disk.count("bulk") == 200
        case.log("after", {})
        case.commit()
        assert _on_disk(case)[-1] == "after"
        case.log("tail", {})
    assert _on_disk(case)[-1] == "tail"  # leaving the writer writes and syncs
    assert case.verify().ok


def test_a_record_older_than_a_second_is_written_with_the_next_append(tmp_path: Path) -> None:
    case = Case.create(tmp_path / "c")
    with case.writer():
        case.log("first", {})
        time.sleep(case.audit.sync_interval + 0.1)
        case.log("second", {})
        assert _on_disk(case)[-2:] == ["first", "second"]


_BATCHES = """
import sys
from pathlib import Path
from ckptrescue.record.case import Case
case = Case.open(Path(sys.argv[1]))
with case.writer():
    print("ready", flush=True)
    n = 0
    while True:
        for _ in range(37):
            record = case.log("bulk", {"n": n, "pad": "y" * (n * 53 % 1500)})
            n += 1
        case.commit()
        print(record["seq"], flush=True)
"""


def test_sigkill_at_many_points_keeps_every_committed_record(tmp_path: Path) -> None:
    for attempt in range(20):
        if attempt % 5 == 0:  # 5 crashes in a row on one case (each verify reads it whole)
            case = Case.create(tmp_path / f"c{attempt}")
        proc = subprocess.Popen([sys.executable, "-c", _BATCHES, str(case.root)],
                                stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(0.02 + 0.005 * attempt)  # a batch of 37 is ~1 ms: every kill lands anew
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        committed = [int(x) for x in out.split()]
        report = Case.open(case.root).verify()
        assert report.ok, (attempt, report.all_problems)
        if committed:
            assert report.chain.records[-1]["seq"] >= committed[-1]
    fresh = Case.open(case.root)
    fresh.log("after.crashes", {})
    report = fresh.verify()
    assert report.ok, report.all_problems
    bulk = [r["details"]["n"] for r in fresh.records("bulk")]
    assert len(bulk) > 37


@pytest.mark.privileged
def test_no_space_left_is_a_torn_tail_named_with_its_path(tmp_path: Path) -> None:
    from fixtures.storage import small_tmpfs

    with small_tmpfs("256k") as mnt:
        case = Case.create(mnt / "c")
        filler = mnt / "filler"
        free = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
        filler.write_bytes(b"\0" * max(0, free - 24 * 1024))
        with pytest.raises(CaseWriteError) as caught, case.writer():
            for i in range(10_000):
                case.log("bulk", {"i": i, "pad": "z" * 700})
        message = caught.value.message
        assert str(case.audit.path) in message
        assert "No space left on device" in message and "appending" in message
        report = Case.open(case.root).verify()
        assert report.ok, report.all_problems  # a torn tail, never tampering
        kept = len(report.chain.records)
        filler.unlink()
        Case.open(case.root).log("space.freed", {})
        report = Case.open(case.root).verify()
        assert report.ok, report.all_problems
        actions = [r["action"] for r in report.chain.records]
        assert actions[-1] == "space.freed" and len(actions) >= kept + 1
        if actions[-2] == "audit.torn_tail":
            assert report.chain.notes  # the torn bytes were chained over


@pytest.mark.privileged
def test_no_space_left_through_the_cli_is_one_line(tmp_path: Path) -> None:
    from fixtures.storage import small_tmpfs

    target = tmp_path / "w.safetensors"
    header = json.dumps({f"t{i}": {"dtype": "F32", "shape": [4], "data_offsets": [16 * i,
                                                                                16 * i + 16]}
                         for i in range(200)}).encode()
    data = b"".join(int.to_bytes(i % 251, 4, "little") * 4 for i in range(200))
    target.write_bytes(len(header).to_bytes(8, "little") + header + data)
    with small_tmpfs("192k") as mnt:
        case = Case.create(mnt / "c")
        fill(mnt / "filler")
        res = run_cli("probe", str(target), "--case", str(case.root))
        assert res.returncode == 4, res.stderr
        assert "Traceback" not in res.stderr
        first = res.stderr.splitlines()[0]
        assert "No space left on device" in first and str(mnt / "c") in first
        (mnt / "filler").unlink()
        report = Case.open(case.root).verify()
        assert report.ok, report.all_problems
