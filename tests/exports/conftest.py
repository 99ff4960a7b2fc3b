"""One incident case for the export tests, built with the kit's own API: a directory of
checkpoints taken as evidence and probed (one is truncated), real tool runs through the guarded
runner, a syslog file and a raw CloudTrail file kept as artifacts, and a versioned bucket on a
local S3 server whose history (with CloudTrail) is read and whose objects are preserved as
evidence. Names an attacker could choose (an S3 key, a log line) start with a formula."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from exports_testlib import HOSTILE_KEY, HOSTILE_LOG, cloudtrail_event, write_safetensors

from ckptrescue.engine.action import from_library
from ckptrescue.engine.executor import record
from ckptrescue.record.case import Case


@pytest.fixture(scope="module")
def incident(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from ckptrescue.checkpoints.probes.checkpoints import probe_paths
    from ckptrescue.effects.runner import SubprocessRunner, ToolCall
    from ckptrescue.stores.s3.api import history, preserve
    from ckptrescue.stores.s3.client import ClientOptions
    from ckptrescue.stores.s3.localserver import start_local_s3

    root = tmp_path_factory.mktemp("incident")
    evidence = root / "evidence"
    evidence.mkdir()
    good = write_safetensors(evidence / "step-100.safetensors", {"w": [1.0, 2.0, 3.0, 4.0]})
    torn = write_safetensors(evidence / "step-200.safetensors", {"w": [5.0, 6.0, 7.0, 8.0]})
    (evidence / "step-200.safetensors").write_bytes(torn[:-6])  # torn at the end

    case = Case.create(root / "case", title="run 7 checkpoints", examiner="alice")
    case.ensure_evidence(evidence, how="examined in place (read-only)")
    from ckptrescue.checkpoints.probes.checkpoints import probe_records
    from ckptrescue.engine.action import ActionResult

    reports = probe_paths([evidence], case=case)
    record(case, ActionResult(audit=probe_records([evidence], reports), findings_recorded=True))

    runner = SubprocessRunner(case)
    runner.run(ToolCall.of("dmesg", "-x", "--time-format", "iso", timeout_s=60,
                           purpose="collect.logs"))
    runner.run(ToolCall.of("journalctl", "-k", "-o", "json", "--no-pager", "-n", "200",
                           timeout_s=60, purpose="collect.logs"))
    syslog = root / "messages"
    syslog.write_text(
        "2026-11-29T10:59:58.000000+00:00 gpu07 kernel: nvme0n1: I/O error, dev nvme0n1, "
        "sector 1234 op 0x1:(WRITE)\n"
        f"2026-11-29T11:00:30+00:00 gpu07 trainer[4242]: {HOSTILE_LOG}\n"
        "Nov 29 11:01:00 gpu07 cron[99]: (root) CMD (rclone sync)\n")
    case.store_artifact_file(syslog, name="var-log-messages", kind="log")

    server = start_local_s3()
    try:
        writer = server.writer_client()
        bucket = f"ckpt-{root.name}".lower()  # moto's state outlives a server in this process
        writer.create_bucket(Bucket=bucket)
        writer.put_bucket_versioning(Bucket=bucket,
                                     VersioningConfiguration={"Status": "Enabled"})
        v1 = writer.put_object(Bucket=bucket, Key=HOSTILE_KEY, Body=good,
                               ChecksumAlgorithm="SHA256")["VersionId"]
        v2 = writer.put_object(Bucket=bucket, Key=HOSTILE_KEY, Body=torn[:-6],
                               ChecksumAlgorithm="SHA256")["VersionId"]
        trail = root / "AWSLogs"
        trail.mkdir()
        (trail / "trail.json").write_text(json.dumps({"Records": [
            cloudtrail_event("PutObject", bucket, HOSTILE_KEY, v1, user="trainer",
                              ip="10.0.0.7", when="2026-11-29T10:00:00Z"),
            cloudtrail_event("PutObject", bucket, HOSTILE_KEY, v2, user="rogue-sync",
                              ip="203.0.113.50", when="2026-11-29T11:00:00Z"),
        ]}))
        options = ClientOptions(endpoint_url=server.endpoint_url, region="us-east-1")
        record(case, from_library(history(f"s3://{bucket}/{HOSTILE_KEY}", client_options=options,
                                          cloudtrail=trail)))  # as the engine records it
        preserve(f"s3://{bucket}/{HOSTILE_KEY}", case=case, client_options=options)
        case.store_artifact_file(trail / "trail.json", name="cloudtrail/trail.json",
                                 kind="cloudtrail")
    finally:
        server.stop()
    return {"case": case, "evidence": evidence, "bucket": bucket, "v1": v1, "v2": v2,
            "good_sha256": hashlib.sha256(good).hexdigest(),
            "torn_sha256": hashlib.sha256(torn[:-6]).hexdigest()}
