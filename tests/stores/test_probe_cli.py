"""``ckptrescue probe`` and ``rank`` on store URLs: the same verdicts as a local probe, the
reports named by their URLs, the bytes read accounted in the case, nothing left mounted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import invoke

from ckptrescue.record.case import Case


def _args(kit: Any) -> list[str]:
    return ["--endpoint-url", kit.options.endpoint_url] if kit.scheme == "s3" else []


def test_probe_and_rank_a_store_prefix_in_place(fuse_ok: None, kit: Any, checkpoints: dict,
                                                tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    kit.put("run/step-1/model.pt", checkpoints["model.pt"].read_bytes())
    kit.put("run/step-2/model.pt", checkpoints["damaged.pt"].read_bytes())
    before = kit.state()
    case = tmp_path / "case"
    assert invoke("case", "new", str(case), "--title", "store").returncode == 0
    result = invoke("probe", kit.url("run/"), "--json", "--case", str(case), *_args(kit))
    assert result.returncode == 1, result.stderr
    verdicts = {c["path"]: c["verdict"] for c in json.loads(result.stdout)["checkpoints"]}
    assert len(verdicts) == 2
    by_step = {("step-1" if "step-1" in p else "step-2"): v for p, v in verdicts.items()}
    assert by_step == {"step-1": "intact", "step-2": "damaged"}
    assert all("://" in p for p in verdicts), verdicts  # named by URL, not the mount
    [read] = [r["details"] for r in Case.open(case).records("store.read")]
    assert read["objects_read"] == 2 and read["bytes_read"] <= 1.01 * read["object_bytes"]
    ranked = invoke("rank", kit.url("run/"), "--json", *_args(kit))
    assert ranked.returncode == 0, ranked.stderr
    resume = json.loads(ranked.stdout)["resume_from"]
    assert "://" in resume and "step-1" in resume
    assert kit.state() == before
    assert "ckptrescue-view" not in Path("/proc/mounts").read_text()


def test_salvage_a_damaged_object_in_place(fuse_ok: None, kit: Any, checkpoints: dict,
                                           tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    kit.put("run/step-2/model.pt", checkpoints["damaged.pt"].read_bytes())
    before = kit.state()
    case = tmp_path / "case"
    assert invoke("case", "new", str(case), "--title", "store").returncode == 0
    out = tmp_path / "recovered"
    result = invoke("salvage", kit.url("run/step-2/model.pt"), str(out), "--case", str(case),
                    "--json", *_args(kit))
    assert result.returncode == 1, result.stderr  # one tensor lost
    data = json.loads(result.stdout)
    assert data["source"].startswith(f"{kit.scheme}://") and data["lost"]
    assert (out / "salvage.json").exists() and list(out.glob("*.salvaged.safetensors"))
    opened = Case.open(case)
    [salvaged] = [r["details"] for r in opened.records("checkpoint.salvaged")]
    assert salvaged["lost"]
    codes = sorted(f.code for f in opened.findings())
    assert codes.count("SV001") == 1 and codes.count("SV002") == 1  # recorded once
    assert [r["details"]["objects_read"] for r in opened.records("store.read")] == [1]
    assert kit.state() == before


def test_profile_a_dataset_prefix_in_place(fuse_ok: None, kit: Any, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for shard in range(2):
        kit.put(f"data/part-{shard}.jsonl", "".join(
            json.dumps({"id": i, "label": i % 3, "text": f"record {i}"}) + "\n"
            for i in range(shard * 50, shard * 50 + 50)).encode())
    out = tmp_path / "p.json"
    result = invoke("dataset", "profile", kit.url("data/"), "-o", str(out), *_args(kit))
    assert result.returncode == 0, result.stderr
    profile = json.loads(out.read_text())
    assert profile["root"].startswith(f"{kit.scheme}://")
    assert sorted(s["path"] for s in profile["shards"]) == ["part-0.jsonl", "part-1.jsonl"]
    assert sum(s["records"] for s in profile["shards"]) == 100
