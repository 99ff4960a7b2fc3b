"""``resume safe-globals``: the exact ``add_safe_globals`` list, checked against the real
``torch.load(weights_only=True)`` in a child process on files the real libraries wrote
(DeepSpeed's optimizer rank files, Megatron's legacy rank files, Accelerate's RNG state, numpy
arrays inside ``torch.save``), a user's own class and a payload.

The oracle: the file fails to load as it is; after running the printed snippet it loads; with
any one safe entry left out it fails again (the list is minimal); torch's own
``get_unsafe_globals_in_checkpoint`` names no global the list leaves out."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_helpers import invoke
from f1_build import built, oracle
from f2_build import built as built2

from ckptrescue.checkpoints.weights_only_globals import needed_globals
from ckptrescue.record.case import Case

ORACLE = textwrap.dedent("""
    import importlib, json, sys, torch
    path, snippet, names, extra = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), \\
        json.loads(sys.argv[4])

    def obj(name):
        module, _, attr = name.rpartition(".")
        return getattr(importlib.import_module(module), attr)

    def loads(entries):
        try:
            with torch.serialization.safe_globals(entries):
                torch.load(path, weights_only=True, map_location="cpu")
            return "ok"
        except Exception as exc:
            return type(exc).__name__ + ": " + str(exc).splitlines()[0][:300]

    out = {"as_is": loads([]),
           "torch_names": sorted(torch.serialization.get_unsafe_globals_in_checkpoint(path))}
    entries = [(obj(n), n) for n in names] + [(obj(n), n) for n in extra]
    out["with_list"] = loads(entries)
    out["leave_one_out"] = {n: loads([e for e in entries if e[1] != n]) for n in names}
    exec(snippet, {})
    try:
        torch.load(path, weights_only=True, map_location="cpu")
        out["after_snippet"] = "ok"
    except Exception as exc:
        out["after_snippet"] = type(exc).__name__ + ": " + str(exc)[:300]
    print("ORACLE" + json.dumps(out))
""")


def run_oracle(path: Path, *, extra: list[str] = (), pythonpath: str = "") -> tuple[dict, dict]:
    result = needed_globals([path])
    data = result.to_json()
    names = [n["global"] for n in data["safe"]]
    env_code = ORACLE
    if pythonpath:
        env_code = f"import sys; sys.path.insert(0, {pythonpath!r})\n" + ORACLE
    proc = oracle(env_code, str(path), data["snippet"], json.dumps(names), json.dumps(list(extra)))
    line = next((x for x in proc.stdout.splitlines() if x.startswith("ORACLE")), None)
    assert line is not None, proc.stderr[-3000:]
    return data, json.loads(line[len("ORACLE"):])


def assert_exact(data: dict, got: dict) -> None:
    names = [n["global"] for n in data["safe"]]
    assert names, "the file needs globals (else this test is vacuous)"
    assert got["as_is"] != "ok"
    assert got["with_list"] == "ok", got["with_list"]
    assert got["after_snippet"] == "ok", got["after_snippet"]
    for name, outcome in got["leave_one_out"].items():
        assert outcome != "ok", f"{name} is not needed: the list is not minimal"
    assert set(got["torch_names"]) <= set(names), set(got["torch_names"]) - set(names)
    assert data["files"][0]["loads_with_safe_list"] is True


def test_deepspeed_optimizer_rank_file() -> None:
    pytest.importorskip("deepspeed")
    path = built("deepspeed") / "zero2" / "global_step3" / \
        "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    data, got = run_oracle(path)
    assert_exact(data, got)
    safe = {n["global"]: n for n in data["safe"]}
    assert "deepspeed.runtime.zero.config.ZeroStageEnum" in safe
    assert all("deepspeed" in n["lists"] and "DeepSpeed 0.19.8" in n["source"]
               for n in safe.values())


def test_megatron_legacy_rank_file() -> None:
    pytest.importorskip("megatron.core")
    path = next(iter(sorted(built("megatron").rglob("model_optim_rng.pt"))))
    data, got = run_oracle(path)
    assert_exact(data, got)
    safe = {n["global"] for n in data["safe"]}
    assert "argparse.Namespace" in safe
    # numpy's RNG state needs the dtype class torch's BUILD checks, which no GLOBAL names
    assert any(n.startswith("numpy.dtypes.") for n in safe)


def test_accelerate_rng_state() -> None:
    pytest.importorskip("accelerate")
    path = built2("accelerate") / "checkpoints" / "checkpoint_0" / "random_states_0.pkl"
    data, got = run_oracle(path)
    assert_exact(data, got)


def test_numpy_values_inside_torch_save(tmp_path: Path) -> None:
    path = tmp_path / "with-numpy.pt"
    subprocess.run([sys.executable, "-c", (
        "import sys, numpy as np, torch\n"
        "torch.save({'w': torch.arange(6, dtype=torch.float32).reshape(2, 3),\n"
        "            'rows': np.arange(4, dtype=np.int64), 'half': np.arange(3, dtype=np.float16),\n"
        "            'scale': np.float32(0.5), 'tag': np.array(['a', 'bc'])}, sys.argv[1])"),
        str(path)], check=True, timeout=300)
    data, got = run_oracle(path)
    assert_exact(data, got)
    safe = {n["global"] for n in data["safe"]}
    assert {"numpy.dtypes.Int64DType", "numpy.dtypes.Float16DType",
            "numpy.dtypes.StrDType"} <= safe


def test_a_user_class_is_named_but_not_vouched_for(tmp_path: Path) -> None:
    (tmp_path / "mytrain").mkdir()
    (tmp_path / "mytrain" / "__init__.py").write_text("")
    (tmp_path / "mytrain" / "config.py").write_text(
        "from dataclasses import dataclass\n\n@dataclass\nclass RunConfig:\n"
        "    lr_log2: int = -6\n    layers: int = 2\n")
    path = tmp_path / "user.pt"
    subprocess.run([sys.executable, "-c", (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
        "import torch\nfrom mytrain.config import RunConfig\n"
        "torch.save({'cfg': RunConfig(), 'w': torch.arange(4)}, sys.argv[1])"), str(path)],
        check=True, timeout=300)
    result = needed_globals([path])
    data = result.to_json()
    assert data["safe"] == [] and data["snippet"] == ""
    assert [(n["global"], n["status"]) for n in data["not_safe"]] == \
        [("mytrain.config.RunConfig", "unlisted")]
    assert {f.code for f in result.findings()} == {"SG002"}
    # the oracle: the user's class (and nothing else) is what torch needs
    proc = oracle(f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n" + ORACLE, str(path),
                  "", "[]", json.dumps(["mytrain.config.RunConfig"]))
    got = json.loads(next(x for x in proc.stdout.splitlines()
                          if x.startswith("ORACLE"))[len("ORACLE"):])
    assert got["as_is"] != "ok" and got["with_list"] == "ok"
    assert got["torch_names"] == ["mytrain.config.RunConfig"]


@pytest.mark.parametrize("kind", ["os.system", "subprocess.Popen", "dcp-dotted-global"])
def test_a_payload_is_never_safe(kind: str, tmp_path: Path) -> None:
    from fixtures import malicious

    marker = tmp_path / "MARKER"
    path = malicious.torch_zip(tmp_path / "evil.pt", malicious.payload(kind, marker=marker))
    result = needed_globals([path])
    data = result.to_json()
    assert data["safe"] == [] and data["snippet"] == ""
    statuses = {n["global"]: n["status"] for n in data["not_safe"]}
    assert statuses and all(s in {"dangerous", "blocked"} for s in statuses.values()), statuses
    assert "SG003" in {f.code for f in result.findings()}
    assert not marker.exists()


def test_a_dangerous_module_reached_as_an_attribute_is_never_to_register(tmp_path: Path) -> None:
    """``torch.serialization.os`` is the ``os`` module: registering it would hand torch.load
    the module, so it is never to register (SG003), not a name merely on no list (SG002)."""
    from fixtures import malicious as mal

    path = mal.torch_zip(tmp_path / "mod.pt", mal.glob("torch.serialization", "os"))
    result = needed_globals([path])
    statuses = {n["global"]: n["status"] for n in result.to_json()["not_safe"]}
    assert statuses == {"torch.serialization.os": "dangerous"}
    codes = {f.code for f in result.findings()}
    assert "SG003" in codes and "SG002" not in codes


def test_cli_case_report_and_hostile_paths(tmp_path: Path) -> None:
    pytest.importorskip("deepspeed")
    step = built("deepspeed") / "zero1" / "global_step2"
    fifo = tmp_path / "fifo.pt"
    import os

    os.mkfifo(fifo)
    loop = tmp_path / "loop.pt"
    os.symlink(loop, loop)
    truncated = tmp_path / "cut.pt"
    data = (step / "zero_pp_rank_0_mp_rank_00_optim_states.pt").read_bytes()
    truncated.write_bytes(data[: len(data) // 3])
    case_dir = tmp_path / "case"
    Case.create(case_dir, title="safe globals")
    res = invoke("resume", "safe-globals", str(step), str(fifo), str(loop), str(truncated),
                 "--case", str(case_dir), "--json")
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr
    out = json.loads(res.stdout)
    by_path = {f["path"]: f for f in out["files"]}
    assert by_path[str(fifo)]["error"] == "not a regular file"
    assert by_path[str(loop)]["error"].startswith("cannot read")
    assert by_path[str(truncated)]["blockers"], "a truncated file is not fixed by a list"
    assert by_path[str(truncated)]["loads_with_safe_list"] is False
    ranks = [f for f in out["files"] if f["path"].startswith(str(step))]
    assert len(ranks) == 3 and all(f["loads_with_safe_list"] for f in ranks)
    case = Case.open(case_dir)
    assert {"SG001", "SG004", "SG005"} <= {f.code for f in case.findings()}
    human = invoke("resume", "safe-globals", str(step))
    assert human.returncode == 0, human.stderr
    assert "torch.serialization.add_safe_globals([" in human.stdout
    md = invoke("report", str(case_dir), "--format", "md", "-o", str(tmp_path / "r.md"))
    assert md.returncode == 0, md.stderr
    text = (tmp_path / "r.md").read_text()
    assert "## The exact safe-globals list" in text
    assert "deepspeed.runtime.zero.config.ZeroStageEnum" in text


def test_resume_checks_playbook(tmp_path: Path) -> None:
    pytest.importorskip("megatron.core")
    run = next(iter(sorted(built("megatron").glob("legacy/iter_*"))))
    res = invoke("playbook", "run", "resume-checks", "--case", str(tmp_path / "case"), "--yes",
                 "--json", "-p", f"run_dir={run}")
    assert res.returncode in (0, 1), res.stderr
    case = Case.open(tmp_path / "case")
    steps = {r["details"]["step"]: r["details"]["status"] for r in case.records("step.finished")}
    assert steps["safe-globals"] == "ok"
    assert "safe globals: " in json.loads(res.stdout)["answer"]
    assert "argparse.Namespace" in (tmp_path / "case" / "report.html").read_text()


def test_nothing_to_load_is_never_exit_0(tmp_path: Path) -> None:
    """A path that names nothing is a one-line usage error; a file given that is no torch file
    is answered and exits 1 (it said 0: "no file torch.load reads"). A folder holding no
    torch file needs nothing registered (a DCP step): exit 0, as before."""
    missing = invoke("resume", "safe-globals", str(tmp_path / "nosuch.pt"))
    assert missing.returncode == 2, missing.stderr
    assert missing.stderr.strip() == f"ckptrescue: error: {tmp_path / 'nosuch.pt'}: no such file or directory"
    text = tmp_path / "notes.txt"
    text.write_text("not a checkpoint\n")
    res = invoke("resume", "safe-globals", str(text))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "no file torch.load reads" in res.stdout
    (tmp_path / "empty").mkdir()
    folder = invoke("resume", "safe-globals", str(tmp_path / "empty"))
    assert folder.returncode == 0, folder.stdout + folder.stderr
    # a folder of damaged checkpoints is no folder without any: a torn .pt is answered, exit 1
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "step-1.pt").write_bytes(b"PK\x03\x04" + b"\x00" * 20)
    torn = invoke("resume", "safe-globals", str(tmp_path / "run"))
    assert torn.returncode == 1, torn.stdout + torn.stderr
    assert "step-1.pt" in torn.stdout
    # what a crash mid-save usually leaves: an empty .pt, a zeroed .ckpt
    for name, body in (("empty.pt", b""), ("last.ckpt", b"\x00" * 4096)):
        folder = tmp_path / f"crashed-{name}"
        folder.mkdir()
        (folder / name).write_bytes(body)
        crashed = invoke("resume", "safe-globals", str(folder))
        assert crashed.returncode == 1 and name in crashed.stdout, crashed.stdout
    # named like one but starting otherwise (a venv's text .pth): passed over, as before
    (tmp_path / "venv").mkdir()
    (tmp_path / "venv" / "distutils-precedence.pth").write_text("import os; x = 1\n")
    text_pth = invoke("resume", "safe-globals", str(tmp_path / "venv"))
    assert text_pth.returncode == 0, text_pth.stdout + text_pth.stderr


def test_a_file_rotated_away_while_the_folder_is_read_is_passed_over(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A live run rotates its checkpoints: a file listed, then removed before it is read, is
    not there, and fails nothing."""
    from ckptrescue.checkpoints import weights_only_globals as wog

    (tmp_path / "run").mkdir()
    listed = wog._candidates
    monkeypatch.setattr(wog, "_candidates",
                        lambda root: [*listed(root), root / "checkpoint-9" / "optimizer.pt"])
    result = needed_globals([tmp_path / "run"])
    assert [f.path for f in result.files] == [str(tmp_path / "run")]
    assert result.files[0].error == "no torch file under it"
