"""The collect-host playbook on this host: journal window, kept log files (a training log and a
raw CloudTrail file), scheduler tools skipped when absent; files unchanged; the report's
timeline shows the collected lines."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

from test_shipped_playbooks import run_playbook

from ckptrescue.record.case import Case


def test_collect_host_keeps_logs_and_cloudtrail(tmp_path: Path) -> None:
    job_log = tmp_path / "train.log"
    job_log.write_text("2026-11-30T22:01:07Z step 1200 loss 1.93\n"
                       "2026-11-30T22:04:11Z ERROR: NCCL watchdog timeout on rank 17\n")
    trail = tmp_path / "123456789012_CloudTrail_us-east-1_20261130T2205Z_x.json.gz"
    trail.write_bytes(gzip.compress(json.dumps({"Records": [{
        "eventTime": "2026-11-30T22:05:00Z", "eventSource": "s3.amazonaws.com",
        "eventName": "PutObject", "requestParameters": {
            "bucketName": "ml-ckpt", "key": "run7/step-1200.pt"}}]}).encode(), mtime=0))
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (job_log, trail)}
    case_dir = tmp_path / "case"
    rc, out, err = run_playbook("collect-host", case_dir, since="2026-11-30 22:00",
                                until="2026-11-30 23:00", job_log=str(job_log),
                                slurm_job="4242", k8s_namespace="train", pod="trainer-0")
    assert rc in (0, 1), err
    case = Case.open(case_dir)
    [logs] = [r["details"] for r in case.records("logs.collected")]
    kinds = {Path(f["path"]).name: f["kind"] for f in logs["files"] if not f["error"]}
    assert kinds["train.log"] == "log:train.log"
    assert {f["path"]: f["sha256"] for f in logs["files"]}[str(job_log)] == before[job_log]
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in before} == before
    runs = [r["details"]["argv"] for r in case.records("tool.run")]
    assert any(a[0] == "journalctl" and "--since" in a for a in runs)
    for tool in ("sacct", "kubectl"):  # absent here: said, never attempted
        if shutil.which(tool) is None:
            assert not any(a[0] == tool for a in runs)
    assert case.verify().ok
    from ckptrescue.exports.timeline import timeline_events

    messages = [e.message for e in timeline_events(case)]
    assert any("NCCL watchdog timeout" in m for m in messages)


def test_a_raw_cloudtrail_file_is_kept_as_cloudtrail(tmp_path: Path) -> None:
    from ckptrescue.storage.collect.host import read_logs

    trail = tmp_path / "trail.json.gz"
    trail.write_bytes(gzip.compress(json.dumps({"Records": [{
        "eventTime": "2026-11-30T22:05:00Z", "eventSource": "s3.amazonaws.com",
        "eventName": "DeleteObject"}]}).encode(), mtime=0))
    big = tmp_path / "big.log"
    big.write_bytes(b"x" * 5000 + b"\nlast line\n")
    [kept, tail] = read_logs([str(trail), str(big)], max_bytes=100)
    assert kept.kind == "cloudtrail" and kept.data is not None
    assert tail.truncated and tail.data is not None and tail.data.data.endswith(b"last line\n")
    assert tail.offset == tail.size - 100
