"""The silent drill (`ckptrescue drill DIR --silent`) and the `silent-failure` playbook.

The drill writes a dataset whose bytes all verify but whose content went wrong, a run whose one
layer froze, and expected.json naming each fault; the playbook must find every one of them —
the right shard, field and code, the frozen layer by name — and nothing else, show them in the
report's two sections, and leave the drill's files as they were.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import invoke

DATASET_SECTION = "Dataset content against its baseline"
TRAINING_SECTION = "Training state across checkpoints"


def tree_hashes(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def md_section(text: str, title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", text, re.MULTILINE | re.DOTALL)
    assert m, f"no section {title!r} in the report"
    return m.group(1)


@pytest.fixture(scope="module")
def silent_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Build the silent drill, run the playbook on it, render the report (once per module)."""
    base = tmp_path_factory.mktemp("silent")
    drill, case = base / "drill", base / "case"
    built = invoke("drill", str(drill), "--silent", "--json")
    assert built.returncode == 0, built.stderr
    info = json.loads(built.stdout)
    root = Path(info["root"])
    before = tree_hashes(root)
    run = invoke("playbook", "run", "silent-failure", "--case", str(case), "--yes",
                 "-P", str(root / "params.json"), "--json")
    after = tree_hashes(root)
    report = invoke("report", str(case), "--format", "json", "-o", "-")
    assert report.returncode == 0, report.stderr
    md = base / "report.md"
    rendered = invoke("report", str(case), "--format", "md", "-o", str(md))
    assert rendered.returncode == 0, rendered.stderr
    return {"base": base, "drill": drill, "case": case, "info": info, "root": root,
            "before": before, "after": after, "run": run,
            "expected": json.loads((root / "expected.json").read_text()),
            "model": json.loads(report.stdout), "md": md.read_text()}


def all_findings(model: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for fs in model["findings_by_severity"].values() for f in fs]


def test_the_silent_drill_builds_only_its_own_directory(silent_run: dict[str, Any]) -> None:
    drill, root = silent_run["drill"], silent_run["root"]
    assert [p.name for p in drill.iterdir()] == ["silent"]  # no image, no map, no S3 server
    assert sorted(p.name for p in root.iterdir() if p.name in silent_run["before"]
                  or p.is_dir()) == ["data-v1", "data-v2", "expected.json", "params.json", "run"]
    shards = [f"part-{i:05d}.jsonl" for i in range(8)]
    assert sorted(p.name for p in (root / "data-v1").iterdir()) == shards
    assert sorted(p.name for p in (root / "data-v2").iterdir()) == shards
    assert sorted(p.name for p in (root / "run").iterdir()) == [
        "step-1000.pt", "step-1200.pt", "step-1400.pt", "step-1600.pt"]
    params = json.loads((root / "params.json").read_text())
    assert params == {"baseline": str(root / "data-v1"), "current": str(root / "data-v2"),
                      "run_dir": str(root / "run"),
                      "baseline_profile": str(root / "data-v1.profile.json")}
    assert sum((root / p).stat().st_size for p in silent_run["before"]) < 8 << 20


def test_the_silent_drill_is_deterministic(silent_run: dict[str, Any], tmp_path: Path) -> None:
    """Integer generators only: a second build writes the same bytes (params.json names its own
    directory, so it differs by the path alone)."""
    again = invoke("drill", str(tmp_path / "d"), "--silent")
    assert again.returncode == 0, again.stderr
    assert "silent-failure" in again.stderr + again.stdout
    first = dict(silent_run["before"])
    second = tree_hashes(tmp_path / "d" / "silent")
    first.pop("params.json")
    second.pop("params.json")
    assert first == second


def test_the_checkpoints_look_like_a_real_training_checkpoint(silent_run: dict[str, Any]) -> None:
    import torch

    ckpt = torch.load(silent_run["root"] / "run" / "step-1200.pt", weights_only=True)
    assert set(ckpt) >= {"model", "optimizer", "lr_scheduler", "global_step"}
    assert ckpt["global_step"] == 1200 and ckpt["lr_scheduler"]["last_epoch"] == 1200
    names = list(ckpt["model"])
    assert len(ckpt["optimizer"]["state"]) == len(names)
    assert set(ckpt["optimizer"]["state"][0]) == {"step", "exp_avg", "exp_avg_sq"}
    assert ckpt["optimizer"]["param_groups"][0]["params"] == list(range(len(names)))
    first = torch.load(silent_run["root"] / "run" / "step-1000.pt", weights_only=True)
    frozen = silent_run["expected"]["run"]["faults"][0]["tensor"].removeprefix("model.")
    for name in names:
        same = torch.equal(first["model"][name], ckpt["model"][name])
        assert same == (name == frozen), name


def test_expected_names_every_fault(silent_run: dict[str, Any]) -> None:
    expected = silent_run["expected"]
    assert expected["playbook"] == "silent-failure"
    faults = expected["dataset"]["faults"]
    assert {f["kind"] for f in faults} == {"label-flip", "emptied-field", "duplicate-shard",
                                           "length-blowup"}
    assert all(re.fullmatch(r"DP0\d\d", f["code"]) for f in faults)
    (frozen,) = expected["run"]["faults"]
    assert frozen["code"] == "TS001" and frozen["step"] == 1000
    assert frozen["tensor"] == "model.transformer.h.1.mlp.c_fc.weight"


def test_the_playbook_finds_every_fault_and_nothing_else(silent_run: dict[str, Any]) -> None:
    run = silent_run["run"]
    assert run.returncode == 1, run.stderr  # done, problems found
    assert json.loads(run.stdout)["status"] == "findings"
    findings = all_findings(silent_run["model"])
    expected = silent_run["expected"]
    want_data = {(f["code"], f["shard"], f["field"]) for f in expected["dataset"]["faults"]}
    got_data = {(f["code"], f["details"]["shard"], f["details"]["field"]) for f in findings
                if f["source"] == "dataset.compare"}
    assert got_data == want_data
    for f in findings:
        if f["code"] == "DP006":
            (dup,) = [e for e in expected["dataset"]["faults"] if e["code"] == "DP006"]
            assert f["details"]["other_shard"] == dup["copy_of"]
        if f["source"] == "dataset.compare":
            assert f["evidence"].endswith("data-v2/" + f["details"]["shard"])
    (frozen,) = expected["run"]["faults"]
    got_ts = [f for f in findings if f["source"] == "trainstate"]
    assert [(f["code"], f["tensors"]) for f in got_ts] == [("TS001", [frozen["tensor"]])]
    assert f"steps {frozen['step']}" in got_ts[0]["title"]
    # nothing else is flagged, by any step
    assert len(findings) == len(want_data) + 1, [f["title"] for f in findings]


def test_the_report_shows_them(silent_run: dict[str, Any]) -> None:
    model, md, expected = silent_run["model"], silent_run["md"], silent_run["expected"]
    shown = {s["title"]: s["shown"] for s in model["sections"]}
    assert shown[DATASET_SECTION] and shown[TRAINING_SECTION]
    content = model["dataset_content"]
    assert content["mode"] == "versions"
    assert {(c["code"], c["shard"], c["field"]) for c in content["flagged"]} == {
        (f["code"], f["shard"], f["field"]) for f in expected["dataset"]["faults"]}
    assert {s["shard"] for s in content["spot_checks"]} == {
        f["shard"] for f in expected["dataset"]["faults"]}
    (frozen,) = expected["run"]["faults"]
    state = model["training_state"]
    assert [f["code"] for f in state["findings"]] == ["TS001"]
    assert state["tensors"][0]["name"] == frozen["tensor"] and state["tensors"][0]["frozen"]
    assert [c["step"] for c in state["checkpoints"]] == expected["run"]["steps"]
    data_md = md_section(md, DATASET_SECTION)
    for f in expected["dataset"]["faults"]:
        assert f"`{f['shard']}`" in data_md
        if f["field"]:
            assert f"| `{f['shard']}` | `{f['field']}` |" in data_md, f
    train_md = md_section(md, TRAINING_SECTION)
    assert "**TS001**" in train_md and frozen["tensor"] in train_md
    assert f"| `{frozen['tensor']}` | yes |" in train_md
    assert model["verification"]["ok"]


def test_the_run_changes_no_drill_file(silent_run: dict[str, Any]) -> None:
    before, after = silent_run["before"], silent_run["after"]
    assert {k: v for k, v in after.items() if k in before} == before
    assert set(after) - set(before) == {"data-v1.profile.json"}  # the playbook's one output
    profile = json.loads((silent_run["root"] / "data-v1.profile.json").read_text())
    assert profile["schema"] == "ckptrescue.profile/1" and len(profile["shards"]) == 8


def test_silent_refuses_a_used_directory_and_stop(silent_run: dict[str, Any]) -> None:
    again = invoke("drill", str(silent_run["drill"]), "--silent")
    assert again.returncode == 2 and "not empty" in again.stderr
    stop = invoke("drill", str(silent_run["base"] / "other"), "--silent", "--stop")
    assert stop.returncode == 2 and "--stop" in stop.stderr
    assert not (silent_run["base"] / "other").exists()


def test_drill_without_silent_is_the_full_drill(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    """`ckptrescue drill DIR` still calls the full drill's builder, with the same arguments;
    the silent builder is not called."""
    from ckptrescue.drill import build, silent

    calls: list[tuple[Path, dict[str, Any]]] = []

    def fake_build(out: Path, **kw: Any) -> Any:
        calls.append((out, kw))
        return build.DrillResult(root=out, image=out / "disk.img",
                                 badsectors_map=out / "badsectors.map",
                                 known_good=out / "known-good.sha256", marker=out / "m")

    def no_silent(out: Path) -> Any:
        raise AssertionError("the silent drill was built")

    monkeypatch.setattr(build, "build", fake_build)
    monkeypatch.setattr(silent, "build", no_silent)
    res = invoke("drill", str(tmp_path / "d"), "--no-s3", "--json")
    assert res.returncode == 0, res.stderr
    assert calls == [(tmp_path / "d", {"s3": False, "tensorflow": True})]
    assert json.loads(res.stdout)["image"] == str(tmp_path / "d" / "disk.img")


def test_the_answer_is_never_cut_inside_a_name(silent_run: dict[str, Any]) -> None:
    """Issue 28: the answer once ended ``model.transformer.h.1.mlp.;`` (a title cut at a fixed
    width). A long part is cut after a whole word and says so."""
    import re

    answer = silent_run["model"]["answer"]
    assert "model.transformer.h.1.mlp.c_fc.weight" in answer  # the frozen tensor, whole
    assert not re.search(r"\w\.\s*(;|$)", answer), answer  # no dotted name cut at a part's end


def _loaded(pid: int, library: str) -> bool:
    try:
        return library in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def test_a_second_silent_drill_is_refused_while_the_first_imports_torch(
        silent_run: dict[str, Any], tmp_path: Path) -> None:
    """The silent drill claims its folder before the seconds of importing torch: a second one
    started into the same folder meanwhile is refused in one line (both once passed the
    emptiness check and wrote over each other), and the first, held in its import while the
    second ran, then builds as if alone."""
    import os
    import signal
    import subprocess
    import time

    from cli_helpers import EXE, run_cli

    out = tmp_path / "d"
    first = subprocess.Popen([EXE, "drill", str(out), "--silent"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 120
        while not _loaded(first.pid, "libtorch"):  # in the middle of importing torch
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first drill never imported torch"
            time.sleep(0.002)
        os.kill(first.pid, signal.SIGSTOP)
        try:
            second = run_cli("drill", str(out), "--silent", timeout=300)
        finally:
            os.kill(first.pid, signal.SIGCONT)
        assert second.returncode == 2, second.stdout + second.stderr
        assert second.stderr.count("ckptrescue:") == 1 and "Traceback" not in second.stderr
        assert str(out / "silent") in second.stderr, second.stderr
        _out, err = first.communicate(timeout=300)
        assert first.returncode == 0, err
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    built = tree_hashes(out / "silent")
    built.pop("params.json")
    expected = dict(silent_run["before"])
    expected.pop("params.json")
    assert built == expected
