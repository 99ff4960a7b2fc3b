"""``resume replicas``: node-local replicas of a DeepSpeed step against its persistent copy,
tensor by tensor, without loading. Replicas: identical copies, one rewritten by ``torch.save``
with one value changed (self-consistent: its own CRCs verify), a stale copy from the previous
step, a truncated one; and a persistent file damaged on disk with an intact replica to stand
in. The oracle is ``torch.load`` of both copies in a child process and ``torch.equal`` per
tensor: the tensors the kit names as differing are exactly those."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_helpers import invoke
from f1_build import built, oracle

from ckptrescue.checkpoints.replicas import compare_replicas
from ckptrescue.record.case import Case

OPT0 = "zero_pp_rank_0_mp_rank_00_optim_states.pt"
OPT1 = "zero_pp_rank_1_mp_rank_00_optim_states.pt"
MODEL = "mp_rank_00_model_states.pt"

EDIT = """
import fixtures.families  # (enum members pickled by value on every interpreter, as its writers)
import sys, torch
obj = torch.load(sys.argv[1], weights_only=False)
flat = obj["optimizer_state_dict"]["single_partition_of_fp32_groups"][0]
with torch.no_grad():
    flat[3] += 0.5
torch.save(obj, sys.argv[2])
"""
DIFF = """
import json, sys, torch
def flat(obj, prefix, out):
    if isinstance(obj, torch.Tensor):
        out[prefix] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            flat(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            flat(v, f"{prefix}.{i}" if prefix else str(i), out)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        flat(vars(obj), prefix, out)
    return out
a = flat(torch.load(sys.argv[1], weights_only=False), "", {})
b = flat(torch.load(sys.argv[2], weights_only=False), "", {})
print("ORACLE" + json.dumps(sorted(k for k in a if k in b and not (
    a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and torch.equal(a[k], b[k])))))
"""


def torch_differs(a: Path, b: Path) -> list[str]:
    proc = oracle(DIFF, str(a), str(b))
    line = next((x for x in proc.stdout.splitlines() if x.startswith("ORACLE")), None)
    assert line is not None, proc.stderr[-2000:]
    return json.loads(line[len("ORACLE"):])


@pytest.fixture
def nodes(tmp_path: Path) -> dict[str, Path]:
    pytest.importorskip("deepspeed")
    ds = built("deepspeed") / "zero2"
    persistent = tmp_path / "persistent" / "global_step3"
    shutil.copytree(ds / "global_step3", persistent)
    node0 = tmp_path / "local" / "node0" / "global_step3"
    node1 = tmp_path / "local" / "node1" / "global_step3"
    node2 = tmp_path / "local" / "node2" / "global_step3"
    for d in (node0, node1, node2):
        d.mkdir(parents=True)
    shutil.copy2(persistent / MODEL, node0 / MODEL)
    shutil.copy2(persistent / OPT0, node0 / OPT0)
    # node1 fetched rank 1's partition from a peer that had rewritten one value
    proc = oracle(EDIT, str(persistent / OPT1), str(node1 / OPT1))
    assert proc.returncode == 0, proc.stderr[-2000:]
    # and holds a stale rank-0 partition of step 2
    shutil.copy2(ds / "global_step2" / OPT0, node1 / OPT0)
    # node2: a copy cut short
    data = (persistent / OPT1).read_bytes()
    (node2 / OPT1).write_bytes(data[: len(data) * 2 // 3])
    return {"persistent": persistent, "node0": node0, "node1": node1, "node2": node2}


def test_each_differing_replica_named_where_torch_load_agrees(nodes: dict[str, Path]) -> None:
    result = compare_replicas(nodes["persistent"], [nodes["node0"], nodes["node1"],
                                                     nodes["node2"]])
    by = {(Path(r.path).parts[-3], f.relpath): r for f in result.files for r in f.replicas}
    assert by[("node0", MODEL)].status == "same" and by[("node0", OPT0)].status == "same"
    edited = by[("node1", OPT1)]
    assert edited.status == "differs" and edited.verdict == "intact"
    stale = by[("node1", OPT0)]
    assert stale.status == "differs"
    assert by[("node2", OPT1)].status == "damaged"
    for copy, rel in ((edited, OPT1), (stale, OPT0)):
        theirs = torch_differs(nodes["persistent"] / rel, Path(copy.path))
        assert theirs, "the oracle sees a difference (else this test is vacuous)"
        assert sorted(copy.differing) == theirs
    assert torch_differs(nodes["persistent"] / OPT0, nodes["node0"] / OPT0) == []
    assert all(f.resume_from == str(nodes["persistent"] / f.relpath) for f in result.files)
    codes = [f.code for f in result.findings()]
    assert codes.count("RP001") == 2 and codes.count("RP002") == 1


def test_a_damaged_persistent_file_resumes_from_an_agreeing_replica(
        nodes: dict[str, Path], tmp_path: Path) -> None:
    p = nodes["persistent"] / OPT0
    data = bytearray(p.read_bytes())
    data[-300] ^= 0x40  # bit rot inside a tensor record: its CRC no longer verifies
    p.write_bytes(bytes(data))
    extra = tmp_path / "local" / "node3" / "global_step3"
    extra.mkdir(parents=True)
    shutil.copy2(nodes["node0"] / OPT0, extra / OPT0)
    result = compare_replicas(nodes["persistent"], [nodes["node0"], nodes["node1"], extra])
    f = next(f for f in result.files if f.relpath == OPT0)
    assert f.persistent is not None and f.persistent.status == "damaged"
    assert f.resume_from in {str(nodes["node0"] / OPT0), str(extra / OPT0)}
    assert "2 intact replica(s) agree" in f.decision
    rp3 = [x for x in result.findings() if x.code == "RP003"]
    assert rp3 and rp3[0].severity.value == "warning"
    assert "except" in result.answer()


def test_cli_case_report_and_playbook(nodes: dict[str, Path], tmp_path: Path) -> None:
    case_dir = tmp_path / "case"
    Case.create(case_dir, title="replicas")
    res = invoke("resume", "replicas", str(nodes["persistent"]), str(nodes["node1"]),
                 "--case", str(case_dir), "--json")
    assert res.returncode == 1, res.stderr
    data = json.loads(res.stdout)
    assert data["counts"] == {"differs": 2}
    md = invoke("report", str(case_dir), "--format", "md", "-o", str(tmp_path / "r.md"))
    assert md.returncode == 0, md.stderr
    text = (tmp_path / "r.md").read_text()
    assert "## Replicas against the persistent copy" in text
    none = invoke("resume", "replicas", str(nodes["persistent"]))
    assert none.returncode == 2
    bad = invoke("resume", "replicas", str(tmp_path / "nope"), "--replica",  # old spelling
                 str(nodes["node0"]))
    assert bad.returncode == 2 and "not a directory" in bad.stderr
    run = invoke("playbook", "run", "resume-checks", "--case", str(tmp_path / "case2"), "--yes",
                 "--json", "-p", f"run_dir={nodes['persistent']}", "-p",
                 f"replica={nodes['node0']}")
    assert run.returncode in (0, 1), run.stderr
    steps = {r["details"]["step"]: r["details"]["status"]
             for r in Case.open(tmp_path / "case2").records("step.finished")}
    assert steps["replicas"] == "ok"


def test_hostile_replica_entries_are_findings(nodes: dict[str, Path], tmp_path: Path) -> None:
    import os

    hostile = tmp_path / "local" / "node9" / "global_step3"
    hostile.mkdir(parents=True)
    os.mkfifo(hostile / OPT0)  # a FIFO under a rank file's name: never opened
    os.symlink(nodes["persistent"] / OPT1, hostile / OPT1)  # a link, not a copy
    (hostile / "evil\x1b[2Jname.pt").write_bytes(b"junk")
    result = compare_replicas(nodes["persistent"], [hostile])
    by = {f.relpath: f.replicas[0] for f in result.files}
    assert by[OPT0].status == "unreadable" and "never opened" in by[OPT0].verdict
    assert by[OPT1].status == "unreadable"
    assert any("evil" in r for r in result.replica_only)
    res = invoke("resume", "replicas", str(nodes["persistent"]), "--replica", str(hostile))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "\x1b" not in res.stdout
