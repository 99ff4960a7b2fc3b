"""Cases the report (and TUI) tests render: built from audit records and step-result artifacts
alone, the way the engine leaves them, with hostile names where an attacker could choose them.
Plain functions; tests/report/conftest.py wraps them as fixtures."""

from __future__ import annotations

import json
from pathlib import Path

from ckptrescue.model import Finding, Severity
from ckptrescue.record.case import Case

EVIL = "<script>alert(1)</script>"
# A name that would break Markdown if it reached a line start or a table unescaped.
EVIL_MD = "x|y`z\n## injected heading\n| a | b |"


def add_step(case: Case, action: str, outputs: dict, step: str) -> None:
    """Record a finished step of ``action`` with ``outputs``, as the engine does (the record
    names the action's output type)."""
    from ckptrescue.actions import registry

    sha = case.store_artifact(json.dumps(outputs).encode(), name=f"{step}.json",
                              kind=f"result:{action}")
    case.log("step.finished", {"run_key": "r1", "step": step, "action": action,
                               "output_type": registry()[action].output_type.__name__,
                               "status": "ok", "outputs_sha256": sha}, artifacts=[sha])


def make_hostile_case(tmp_path: Path) -> Case:
    """A case with hostile names where an attacker could choose them (also used by the TUI
    tests, which walk every node of the findings tree over it)."""
    case = Case.create(tmp_path / "case", title=f"run 7 {EVIL}", examiner="alice")
    case.add_evidence(kind="image", source=f"/evidence/{EVIL}.img", acquired_how="ddrescue",
                      size=4096, sha256="ab" * 32)
    add_step(case, "probe", {"checkpoints": [
        {"path": "/mnt/run/step-200.pt", "format": "torch-zip", "verdict": "damaged",
         "tensors_total": 3, "damaged_tensors": [EVIL, "model.fc.weight"],
         "suspect_tensors": [], "missing_tensors": [],
         "findings": [{"code": "TZ010", "severity": "error", "title": "CRC-32 mismatch",
                       "offset": 4096, "length": 64, "tensors": [EVIL], "details": {}}]},
        {"path": "/mnt/run/step-300.pt", "format": "torch-zip", "verdict": "intact",
         "tensors_total": 3, "damaged_tensors": [], "suspect_tensors": [],
         "missing_tensors": [], "findings": []},
    ]}, "probe")
    add_step(case, "rank", {"checkpoints": [], "resume_from": "/mnt/run/step-300.pt"}, "rank")
    add_step(case, "image", {"image": "/case/work/disk.img", "mapfile": "/case/work/disk.map",
                             "image_sha256": "cd" * 32, "size": 1 << 20,
                             "rescued_bytes": (1 << 20) - 1024, "bad_ranges": [[8192, 9216]]},
             "image")
    add_step(case, "locate", {"ranges": [{"start": 8192, "end": 9216, "files": [
        {"path": "run/step-200.pt", "file_offset": 100, "length": 1024,
         "tensors": [EVIL]}]}]}, "locate")
    case.add_finding(Finding("TZ010", Severity.ERROR, f"CRC mismatch in {EVIL}",
                             evidence="/mnt/run/step-200.pt", offset=4096, length=64,
                             tensors=(EVIL,)))
    case.log("tool.refused", {"argv": ["fsck", "-y", "/dev/sda"], "reason": "repairs"})
    return case


def make_full_case(case: Case) -> Case:
    """The hostile case plus everything else a full incident records (salvage, the object
    store, kernel guarantees, commands run, tool versions): every section has content."""
    add_step(case, "salvage", {"salvaged": [
        {"checkpoint": "/mnt/run/step-200.pt", "output": f"/case/work/salvage/{EVIL_MD}",
         "recovered": ["model.fc.bias"], "lost": [{"name": EVIL_MD, "reason": "CRC"}],
         "filled": [], "source": "/mnt/run/step-200.pt", "source_verdict": "damaged"}]},
        "salvage")
    add_step(case, "s3.verify", {"objects": [
        {"key": f"run/{EVIL_MD}", "status": "mismatch", "algorithm": "CRC64NVME",
         "detail": {"message": EVIL_MD}},
        {"key": "run/step-300.pt", "status": "match", "algorithm": "SHA256", "detail": {}}],
        "counts": {"match": 1, "mismatch": 1, "total": 2}, "errors": []}, "s3-verify")
    add_step(case, "s3.history", {"keys": [
        {"key": "run/step-300.pt", "versions": [], "known_good": "v-good-1"}]}, "s3-history")
    add_step(case, "rank", {"checkpoints": [
        {"path": "/mnt/run/global_step3", "verdict": "incomplete", "step": 3,
         "family": "deepspeed", "bad_ranks": [f"zero_pp_rank_1_{EVIL_MD}"], "bad_ranks_total": 1},
        {"path": "/mnt/run/global_step2", "verdict": "intact", "step": 2, "family": "deepspeed",
         "bad_ranks": [], "bad_ranks_total": 0}],
        "resume_from": "/mnt/run/global_step2", "family": "deepspeed",
        "pointer_fix": {"pointer": "/mnt/run/latest", "current": "global_step3",
                        "write": "global_step2", "target": "/mnt/run/global_step2",
                        "family": "deepspeed"}}, "rank-family")
    add_step(case, "trainstate", {
        "checkpoints": [{"path": "/mnt/run/step-100.pt", "step": 100, "format": "torch-zip",
                         "verdict": "intact"},
                        {"path": "/mnt/run/step-200.pt", "step": 200, "format": "torch-zip",
                         "verdict": "intact"}],
        "tensors": [{"name": f"model.{EVIL_MD}", "frozen": True, "sign_agreement": [],
                     "norms": [1.0, 1.0], "intervals": [
                         {"from": 100, "to": 200, "rel_l2": 0.0, "max_abs_change": 0.0,
                          "identical": True, "elements": 4, "nonfinite": 0}]}],
        "scalars": {"optimizer.param_groups.0.lr": [0.001, 0.0]}, "skipped": {},
        "findings": [{"code": "TS001", "severity": "warning",
                      "title": f"1 parameter(s) bit-identical: model.{EVIL_MD}",
                      "tensors": [f"model.{EVIL_MD}"]}],
        "answer": "1 training-state finding(s) over 2 checkpoints"}, "trainstate")
    add_step(case, "dataset.compare", {
        "compare": {"mode": "versions", "tests_run": 40, "per_test_level": 2.5e-05,
                    "answer": "1 deviation(s) in 1 shard(s)", "flagged": [
                        {"code": "DP001", "shard": f"part-{EVIL_MD}.jsonl", "field": EVIL,
                         "test": "two-proportion z-test", "statistic": 31.0,
                         "p_value": 1e-12, "effect": {"rate_diff": 0.9},
                         "threshold": {"rate_diff": 0.05}, "flagged": True,
                         "summary": "empty rate 0.9 vs 0.0"}]},
        "spot_checks": [{"shard": f"part-{EVIL_MD}.jsonl", "seed": 3, "k": 2,
                         "method": "bottom-k", "flagged": {
                             "shard": f"part-{EVIL_MD}.jsonl", "indices": [4, 9],
                             "records_read": 100, "note": "", "records": [
                                 {"index": 4, "values": {EVIL: ""}, "marked": {EVIL: "empty"}},
                                 {"index": 9, "values": {EVIL: EVIL_MD}, "marked": {}}]},
                         "reference": {"shard": "part-1.jsonl", "indices": [4, 9],
                                       "records_read": 100, "note": "", "records": [
                                           {"index": 4, "values": {EVIL: "text"},
                                            "marked": {}}]}}],
        "answer": "1 deviation(s) in 1 shard(s)"}, "compare")
    add_step(case, "manifest.diff", {
        "old": "/cases/old.sha256", "new": "/cases/new.sha256", "output": None,
        "changes_file": None, "counts": {"added": 0, "removed": 0, "changed": 0, "renamed": 1,
                                         "unchanged": 4},
        "changes": [{"status": "renamed", "path": f"data/{EVIL_MD}", "sha256": "ab" * 32,
                     "old_path": f"data/{EVIL}", "old_sha256": "ab" * 32}],
        "changes_omitted": 0, "bad_lines": [], "duplicates": [],
        "answer": "0 changed, 0 removed, 0 added, 1 renamed; 4 unchanged"}, "manifest-diff")
    add_step(case, "resume.safe_globals", {
        "paths": ["/mnt/run/global_step3"], "files": [
            {"path": f"/mnt/run/{EVIL_MD}.pt", "format": "torch-zip", "verdict": "intact",
             "globals_total": 9, "needed": [{"global": f"evil.{EVIL}", "status": "unlisted",
                                             "lists": [], "source": "", "reason": EVIL_MD}],
             "blockers": [], "loads_with_safe_list": False, "error": None}],
        "safe": [{"global": "argparse.Namespace", "status": "safe", "lists": ["megatron"],
                  "source": "megatron-core SAFE_GLOBALS", "reason": ""}],
        "not_safe": [{"global": f"evil.{EVIL}", "status": "unlisted", "lists": [],
                      "source": "", "reason": EVIL_MD}],
        "snippet": "import torch\n", "answer": "1 of 1 file(s) need globals"}, "safe-globals")
    add_step(case, "resume.keys", {
        "checkpoint": f"/mnt/run/{EVIL_MD}.pt", "expected_from": "reference /mnt/ref.pt",
        "format": "torch-zip", "verdict": "intact", "checkpoint_keys": 2, "expected_keys": 2,
        "matched_before": 0, "matched_after": 2, "resolved": True,
        "causes": ["module. from DistributedDataParallel"],
        "rules": [{"kind": "strip", "cause": "module. from DistributedDataParallel",
                   "detail": {"component": "module"}, "fixes": 2}],
        "mapping": [{"from": f"module.{EVIL}", "to": EVIL}], "mapping_total": 1,
        "tied": [], "missing": [], "missing_total": 0, "unexpected": [EVIL_MD],
        "unexpected_total": 1, "outside": {}, "shape_mismatches": [], "flat_params": [],
        "snippet": "def fix_keys(sd):\n", "snippet_lines": ["def fix_keys(sd):"],
        "answer": "0 of 2 expected names match as saved; 2 after the mapping"}, "keys")
    add_step(case, "resume.reassemble", {
        "step_dir": "/mnt/run/checkpoint-3/global_step3", "family": "deepspeed", "step": 3,
        "world": {"dp": 2}, "candidates": [f"/mnt/run/tmp-{EVIL_MD}"],
        "ranks": [{"rank": "zero_pp_rank_1", "role": "optim", "relpath": EVIL_MD,
                   "status": "replaced", "source": f"/mnt/run/tmp-{EVIL_MD}/{EVIL}",
                   "sha256": "ab" * 32, "size": 9, "tried": [
                       {"path": f"/mnt/old/{EVIL}", "outcome": "records step 2, not 3"}]}],
        "needed": 1, "reassemblable": True, "check_problems": [], "plan_file": "/case/p.json",
        "plan_script": "/case/p.sh", "dest": "/case/out",
        "answer": "global_step3 can be reassembled"}, "reassemble")
    add_step(case, "resume.world_size", {
        "step_dir": f"/mnt/run/{EVIL_MD}", "ranks": 3, "family": "deepspeed",
        "verdict": "intact", "step": 3, "saved_world": {"dp": 2, "mp": 1, "zero_stage": 2},
        "loads": "after-conversion", "how": EVIL,
        "commands": [f"python -m deepspeed.checkpoint.ds_to_universal --input_folder {EVIL}"],
        "files_needed": [f"/mnt/run/{EVIL_MD}/mp_rank_00_model_states.pt"],
        "config": {"checkpoint": {"load_universal": True}}, "notes": [EVIL_MD],
        "answer": "global_step3 loads at 3 ranks only after conversion"}, "world-size")
    add_step(case, "resume.replicas", {
        "persistent": "/mnt/run/global_step3", "replicas": [f"/local/{EVIL_MD}"],
        "files": [{"relpath": EVIL_MD, "persistent": {"status": "intact", "path": EVIL},
                   "replicas": [{"where": "/local/n1", "path": f"/local/{EVIL}",
                                 "status": "differs", "verdict": "intact", "differing_total": 1,
                                 "differing": [EVIL_MD]}],
                   "resume_from": "/mnt/run/global_step3/x.pt", "decision": "intact"}],
        "counts": {"differs": 1}, "replica_only": [], "answer": "1 replica file(s) compared"},
        "replicas")
    add_step(case, "hub.verify", {
        "root": "/home/u/.cache/huggingface/hub", "counts": {"repos": 1, "blobs": 2,
                                                              "blobs_ok": 1, "blobs_bad": 1},
        "repos": [{"folder": "models--acme--x", "repo_type": "model", "repo_id": f"acme/{EVIL}",
                   "refs": {"main": "ab" * 20}, "revisions": ["ab" * 20], "blobs_total": 2,
                   "blobs_ok": 1, "blobs": [{"name": "cd" * 32, "status": "mismatch",
                                             "size": 10, "actual": "ef" * 32,
                                             "linked_from": [f"{'ab' * 20}:{EVIL_MD}"]}],
                   "broken_revisions": {"ab" * 20: [f"{EVIL_MD}: mismatch"]},
                   "problems": []}], "problems": [], "bytes_hashed": 20,
        "answer": "hub cache: 1 repos, 1 revisions, 1 of 2 blobs match their names"},
        "hub-verify")
    case.log("safety.kernel", {"guarantee": "block-device-readonly", "target": "/dev/loop7",
                               "enforced": True, "how": "BLKROSET", "previous": "rw",
                               "by_kit": True})
    case.log("tool.run", {"argv": ["xfs_db", "-r", EVIL_MD], "returncode": 0,
                          "duration_s": 0.1, "stdout_sha256": "ef" * 32,
                          "stderr_sha256": "01" * 32, "timed_out": False, "truncated": False})
    case.log("tool.version", {"tool": "xfs_db", "executable": "/usr/sbin/xfs_db",
                              "version": "xfs_db version 6.1.0"})
    case.add_finding(Finding("S3001", Severity.ERROR, f"{EVIL_MD}: local file does not match",
                             evidence=f"s3://bucket/run/{EVIL_MD}"))
    return case
