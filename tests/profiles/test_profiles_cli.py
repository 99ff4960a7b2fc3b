"""``dataset profile``, ``dataset compare`` and ``dataset quarantine`` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import invoke

from fixtures import profiles as fx
from fixtures.datasets import tree_digest


def test_profile_then_compare_versions_names_the_emptied_shard(tmp_path: Path) -> None:
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    fx.make_dataset(v1, seed=1)
    fx.make_dataset(v2, seed=1, incident="emptied")
    before = tree_digest(v2)
    profile = tmp_path / "v1.profile.json"
    result = invoke("dataset", "profile", str(v1), "-o", str(profile))
    assert result.returncode == 0, result.stderr
    assert json.loads(profile.read_text())["schema"] == "ckptrescue.profile/1"
    result = invoke("dataset", "compare", str(profile), str(v2), "--json",
                    "--seed", "3")
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    victim = f"part-{fx.VICTIM:05d}.jsonl"
    assert {c["shard"] for c in data["compare"]["flagged"]} == {victim}
    [spot] = data["spot_checks"]
    assert spot["shard"] == victim and spot["seed"] == 3
    assert spot["flagged"]["records"] and spot["reference"]["records"]
    assert any(r.get("marked") for r in spot["flagged"]["records"])
    assert tree_digest(v2) == before


def test_compare_shards_of_a_clean_dataset_exits_0(tmp_path: Path) -> None:
    fx.make_dataset(tmp_path / "d", seed=2)
    result = invoke("dataset", "compare", str(tmp_path / "d"), "--mode", "shards")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no shard deviates" in result.stdout


def test_compare_without_current_in_versions_mode_is_a_usage_error(tmp_path: Path) -> None:
    fx.make_dataset(tmp_path / "d", seed=2, shards=2)
    result = invoke("dataset", "compare", str(tmp_path / "d"))
    assert result.returncode == 2 and "--mode shards" in result.stderr


def test_quarantine_from_a_verify_json(tmp_path: Path) -> None:
    root = tmp_path / "d"
    root.mkdir()
    lines = [json.dumps({"id": i}) for i in range(30)]
    lines[4] = '{"id": '
    (root / "a.jsonl").write_text("\n".join(lines) + "\n")
    verify = invoke("dataset", "verify", str(root), "--json")
    assert verify.returncode == 1
    (tmp_path / "verify.json").write_text(verify.stdout)
    out = tmp_path / "q.json"
    result = invoke("dataset", "quarantine", str(root), "--verify", str(tmp_path / "verify.json"),
                    "-o", str(out))
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    assert data["records"][0]["path"] == "a.jsonl" and data["records"][0]["index"] == 4
    assert invoke("dataset", "quarantine", str(root), "--verify", str(tmp_path / "verify.json"),
                  "-o", str(root / "q.json")).returncode == 2  # never inside the dataset
    nothing = invoke("dataset", "quarantine", str(root), "-o", str(tmp_path / "q2.json"))
    assert nothing.returncode == 2 and "no audit or verify" in nothing.stderr
    # a mistyped DIR: its list would name paths under a folder that is not there
    typo = invoke("dataset", "quarantine", str(tmp_path / "dd"), "--verify",
                  str(tmp_path / "verify.json"), "-o", str(tmp_path / "q3.json"))
    assert typo.returncode == 2 and "not a directory" in typo.stderr, typo.stderr
    assert not (tmp_path / "q3.json").exists()
