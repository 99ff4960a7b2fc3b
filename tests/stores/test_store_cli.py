"""``ckptrescue store verify|history|preflight|preserve|restore`` from the command line on
Azurite, fake-gcs-server and moto: exit codes, JSON, nothing written to the store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import invoke


def _args(kit: Any) -> list[str]:
    return ["--endpoint-url", kit.options.endpoint_url] if kit.scheme == "s3" else []


def test_store_commands_end_to_end(kit: Any, checkpoints: dict, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    data = checkpoints["model.pt"].read_bytes()
    kit.put("run/step-1/model.pt", data)
    before = kit.state()
    url = kit.url("run/")
    verify = invoke("store", "verify", url, "--json", *_args(kit))
    assert verify.returncode == 0, verify.stderr
    assert json.loads(verify.stdout)["ok"] is True
    history = invoke("store", "history", kit.url("run/step-1/model.pt"), "--json", *_args(kit))
    assert history.returncode == 0, history.stderr
    keys = json.loads(history.stdout)["keys"]
    assert keys and keys[0]["versions"]
    newest = keys[0]["versions"][0]
    version = str(newest.get("version_id") or newest.get("version") or "")
    assert invoke("store", "preflight", url, *_args(kit)).returncode in (0, 1)
    dest = tmp_path / "preserved"
    case = tmp_path / "case"
    assert invoke("case", "new", str(case), "--title", "store").returncode == 0
    kept = invoke("store", "preserve", url, "--dest", str(dest), "--case", str(case),
                  *_args(kit))
    assert kept.returncode == 0, kept.stderr
    layout = [p for p in dest.rglob("model.pt") if p.is_file()]
    assert layout and all(p.read_bytes() == data for p in layout)
    assert invoke("probe", str(layout[0])).returncode == 0  # the kit runs on the copy as is
    from ckptrescue.record.case import Case

    [record] = [r["details"] for r in Case.open(case).records("store.preserved")]
    assert record["objects"][0]["sha256"]
    restored = invoke("store", "restore", kit.url("run/step-1/model.pt"), "--to",
                      str(tmp_path / "restored"), "--version", version, *_args(kit))
    assert restored.returncode == 0, restored.stderr
    assert [p.read_bytes() for p in (tmp_path / "restored").rglob("model.pt")] == [data]
    missing = invoke("store", "preserve", url, *_args(kit))
    assert missing.returncode == 2 and "--dest" in missing.stderr
    assert kit.state() == before


def test_preserve_and_restore_never_write_to_system_trees_devices_or_evidence(
        tmp_path: Path) -> None:
    case = tmp_path / "case"
    assert invoke("case", "new", str(case), "--title", "store").returncode == 0
    refused = invoke("store", "preserve", "s3://bkt/run/", "--dest", "/etc/ckptrescue-x")
    assert refused.returncode == 3 and "/etc" in refused.stderr
    refused = invoke("store", "restore", "s3://bkt/run/a.pt", "--to", str(case / "audit.jsonl"),
                     "--version", "1", "--case", str(case))
    assert refused.returncode == 3
    assert not Path("/etc/ckptrescue-x").exists()
