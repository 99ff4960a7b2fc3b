"""The downstream check hook (``probes/evalhook.py``, ``rank --eval``): the responder's own eval
command runs confined against resumable checkpoints, newest first, and ``rank`` resumes from the
newest one that also passes.

Fixtures: a run of three ``torch.save`` checkpoints of integer-valued weights
(``fixtures/checkpoints.exact_tensor``, ``|w| < 1024``); the newest has "diverged" (weights
times 4096). Eval scripts are written by each test; the torch one reads the checkpoint with
``torch.load(weights_only=True)`` and prints ``{"metric": max |w|}``. Needs bubblewrap with
user namespaces (skips with the reason otherwise; a failure under
CKPTRESCUE_REQUIRE_PRIVILEGED=1).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import run_cli

from fixtures import checkpoints as fx

from .conftest import tree_hash

pytestmark = pytest.mark.needs_tool("bwrap")

PY = sys.executable
GOOD_MAX = 1024.0  # |w| < 2**10 for exact_tensor(bits=10, scale_log2=0)

TORCH_EVAL = """
import json, sys
import torch
sd = torch.load(sys.argv[1], map_location="cpu", weights_only=True)
worst = max(float(t.abs().max()) for t in sd["model"].values())
print("evaluating", sys.argv[1])
print(json.dumps({"metric": worst}))
"""


@pytest.fixture(scope="module", autouse=True)
def _sandbox_works() -> None:
    """bubblewrap must be able to build the namespaces here (else skip, with bwrap's reason)."""
    from ckptrescue.effects.sandbox import run_confined

    if not any(os.access(os.path.join(d, "bwrap"), os.X_OK)
               for d in os.environ.get("PATH", "").split(os.pathsep)):
        return  # the needs_tool marker skips (or fails in CI)
    run = run_confined([PY, "-c", "pass"], timeout_s=60, memory_mb=1024)
    if run.status != "exited" or run.returncode != 0:
        reason = f"the eval sandbox cannot start here: {run.reason or run.stderr[-300:]}"
        if os.environ.get("CKPTRESCUE_REQUIRE_PRIVILEGED") == "1":
            pytest.fail(reason)
        pytest.skip(reason)


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / "scripts" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(textwrap.dedent(body))
    return path


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    for i, step in enumerate((100, 200, 300)):
        w = fx.exact_tensor(16, 8, seed=i, scale_log2=0)
        if step == 300:
            w = w * 4096  # diverged: still a perfectly intact file
        fx.save_zip(run / f"step_{step}.pt", {"model": {"w": w,
                                                        "b": fx.exact_tensor(8, seed=10 + i,
                                                                             scale_log2=0)},
                                              "step": step})
    return run


def test_rank_resumes_from_newest_checkpoint_that_passes_the_eval(run_dir, tmp_path):
    from ckptrescue.checkpoints.probes.evalhook import run_eval
    from ckptrescue.checkpoints.rank import rank

    evalpy = script(tmp_path, "eval.py", TORCH_EVAL)
    before = tree_hash(run_dir)
    seen = []

    def accept(c) -> bool:
        res = run_eval([PY, str(evalpy), "{checkpoint}"], Path(c.path), timeout_s=120,
                       memory_mb=8192, max_metric=GOOD_MAX)
        seen.append(res)
        return res.passed

    res = rank(run_dir, accept=accept)
    assert res.resume_from == str(run_dir / "step_200.pt")
    assert [(Path(r.checkpoint).name, r.status) for r in seen] == [
        ("step_300.pt", "failed"), ("step_200.pt", "passed")]  # step_100 never evaluated
    assert seen[0].metric is not None and seen[0].metric >= GOOD_MAX * 4096 / 2
    assert seen[1].metric is not None and seen[1].metric < GOOD_MAX
    assert seen[1].metric == float(fx.exact_tensor(16, 8, seed=1, scale_log2=0).abs().max())
    assert seen[0].threshold == {"max": GOOD_MAX} and "> max" in seen[0].reason
    rec = seen[1].audit[0]
    assert rec.action == "checkpoint.eval"
    assert {"argv", "checkpoint", "metric", "status", "duration_s", "limits"} <= set(rec.details)
    assert rec.details["limits"]["memory_mb"] == 8192
    assert len(seen[1].stdout_sha256 or "") == 64
    assert tree_hash(run_dir) == before


def test_cli_rank_eval_json_human_and_audit(run_dir, tmp_path):
    """``ckptrescue rank --eval 'PY eval.py {checkpoint}' --eval-max``: a damaged newer
    checkpoint is never evaluated; the JSON keeps its keys and gains ``eval``; the human output
    has one line per evaluated checkpoint; the case holds a ``checkpoint.eval`` record each."""
    from typer.testing import CliRunner

    from ckptrescue.cli.main import app
    from ckptrescue.record.case import Case

    evalpy = script(tmp_path, "eval.py", TORCH_EVAL)
    damaged = fx.copy(run_dir / "step_100.pt", run_dir / "step_400.pt")
    fx.truncate(damaged, damaged.stat().st_size - 100)
    command = f"{PY} {evalpy} {{checkpoint}}"
    case_dir = tmp_path / "case"
    Case.create(case_dir, title="eval", examiner="pytest")
    cli = CliRunner()
    res = cli.invoke(app, ["rank", str(run_dir), "--eval", command, "--eval-max", "1024",
                           "--eval-timeout", "120", "--case", str(case_dir), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["resume_from"] == str(run_dir / "step_200.pt")
    assert [c["path"] for c in data["checkpoints"]][0] == str(damaged)
    assert [(Path(e["path"]).name, e["status"]) for e in data["eval"]] == [
        ("step_300.pt", "failed"), ("step_200.pt", "passed")]
    assert set(data["eval"][1]) >= {"path", "status", "metric"}
    records = [r for r in Case.open(case_dir).audit.records()
               if r.get("action") == "checkpoint.eval"]
    assert [Path(r["details"]["checkpoint"]).name for r in records] == ["step_300.pt",
                                                                         "step_200.pt"]
    # repeated --eval: the argv as given; human output
    res = cli.invoke(app, ["rank", str(run_dir), "--eval", PY, "--eval", str(evalpy),
                           "--eval", "{checkpoint}", "--eval-max", "1024",
                           "--eval-timeout", "120"])
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("eval ")]
    assert len(lines) == 2
    assert lines[0].split()[1] == "FAILED" and lines[0].split()[4] == str(run_dir / "step_300.pt")
    assert lines[1].split()[1] == "PASSED"
    assert "resume from: " + str(run_dir / "step_200.pt") in res.stdout
    # nothing passes: no resume, exit 1 (the installed command, in a process of its own)
    const = script(tmp_path, "const.py", "print(5)\n")
    done = run_cli("rank", str(run_dir), "--eval", f"{PY} {const} {{checkpoint}}",
                   "--eval-max", "0", "--json")
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert data["resume_from"] is None
    assert [(e["status"], e["metric"]) for e in data["eval"]] == [("failed", 5.0)] * 3


def _procs_with(token: str) -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if token.encode() in fh.read():
                    out.append(int(pid))
        except OSError:
            continue
    return out


def test_eval_timeout_kills_the_whole_process_tree(run_dir, tmp_path):
    from ckptrescue.checkpoints.probes.evalhook import run_eval

    token = f"ckptrescue-eval-sleeper-{uuid.uuid4().hex}"
    sleeper = script(tmp_path, f"{token}.py", f"""
        import subprocess, sys, time
        # a grandchild in its own session: outside the eval's process group
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "{token}"],
                         start_new_session=True)
        print("sleeping", flush=True)
        time.sleep(120)
        """)
    start = time.monotonic()
    res = run_eval([PY, str(sleeper), "{checkpoint}"], run_dir / "step_100.pt", timeout_s=3,
                   memory_mb=1024)
    assert res.status == "timeout", res
    assert time.monotonic() - start < 30
    deadline = time.monotonic() + 5
    while _procs_with(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _procs_with(token) == []


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.setblocking(False)
    yield srv
    srv.close()


ESCAPES = {
    "write-next-to-evidence": 'open(os.path.join(os.path.dirname(ckpt), "escaped.txt"), "w")'
                              '.write("x")',
    "write-the-checkpoint": 'open(ckpt, "r+b").write(b"\\0" * 16)',
    "write-home-dir": 'open(os.path.join(SANDBOX_OUTSIDE, "escaped.txt"), "w").write("x")',
    "connect-host-loopback": 'socket.create_connection(("127.0.0.1", PORT), timeout=5)',
    "connect-internet": 'socket.create_connection(("1.1.1.1", 80), timeout=5)',
}


@pytest.mark.parametrize("kind", sorted(ESCAPES))
def test_eval_cannot_write_outside_scratch_or_reach_the_network(kind, run_dir, tmp_path,
                                                                  listener):
    from ckptrescue.checkpoints.probes.evalhook import run_eval

    outside = tmp_path / "outside"
    outside.mkdir()
    port = listener.getsockname()[1]
    body = (f"import os, socket, sys\nckpt = sys.argv[1]\nPORT = {port}\n"
            f"SANDBOX_OUTSIDE = {str(outside)!r}\n"
            "open('inside-scratch.txt', 'w').write('allowed')\n"
            f"{ESCAPES[kind]}\nprint(1)\n")
    evil = script(tmp_path, "evil.py", body)
    before = tree_hash(run_dir)
    res = run_eval([PY, str(evil), "{checkpoint}"], run_dir / "step_100.pt", timeout_s=60,
                   memory_mb=1024, min_metric=0)
    assert res.status == "error", res
    assert ("Read-only file system" in res.stderr_tail or "Network is unreachable"
            in res.stderr_tail or "Connection refused" in res.stderr_tail), res.stderr_tail
    assert tree_hash(run_dir) == before
    assert not (run_dir / "escaped.txt").exists() and list(outside.iterdir()) == []
    try:
        conn, _ = listener.accept()
        conn.close()
        reached = True
    except BlockingIOError:
        reached = False
    assert not reached


def test_eval_past_the_memory_limit_is_an_error(run_dir, tmp_path):
    from ckptrescue.checkpoints.probes.evalhook import run_eval

    hog = script(tmp_path, "hog.py", """
        blocks = [bytearray(64 << 20) for _ in range(16)]  # 1 GiB
        print(len(blocks))
        """)
    res = run_eval([PY, str(hog), "{checkpoint}"], run_dir / "step_100.pt", timeout_s=60,
                   memory_mb=256, min_metric=0)
    assert res.status == "error", res
    assert "MemoryError" in res.stderr_tail and "memory limit" in res.reason
    assert res.limits["memory_mb"] == 256


def test_metric_parsing_and_argv_template():
    from ckptrescue.checkpoints.probes.evalhook import argv_template, parse_metric
    from ckptrescue.errors import UsageError

    assert parse_metric('loss 3\n{"metric": 0.5}\n') == 0.5
    assert parse_metric("acc\n0.75\n\n") == 0.75
    assert parse_metric('{"other": 1}') is None
    assert parse_metric("no number") is None
    assert parse_metric("acc=0.1\nacc=0.9\ndone\n", r"acc=([\d.]+)") == 0.9
    assert parse_metric("x acc: 7 y", r"acc: (?P<metric>\d+)") == 7.0
    assert argv_template("python 'my eval.py' --ckpt={checkpoint}") == [
        "python", "my eval.py", "--ckpt={checkpoint}"]
    assert argv_template(["python eval.py {checkpoint}"]) == ["python", "eval.py",
                                                               "{checkpoint}"]
    assert argv_template(["py", "a b.py", "{checkpoint}"]) == ["py", "a b.py", "{checkpoint}"]
    with pytest.raises(UsageError, match="checkpoint"):
        argv_template("python eval.py")
