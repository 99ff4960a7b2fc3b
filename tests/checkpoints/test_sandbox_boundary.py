"""The loader sandbox is a boundary: malicious checkpoints never run anything.

Fixtures: ``fixtures/malicious.py`` builds, from pickle opcodes, checkpoints whose pickles call
``os.system``, ``posix.system``, ``subprocess.Popen``/``check_call``, ``builtins.exec``/``eval``,
``socket.socket(...).connect`` and dotted names under ``torch.distributed.checkpoint.`` (the
prefix-allowlist hole), in every container that is reachable: torch zip ``data.pkl``, legacy
torch stream, DCP ``.metadata``, HF ``.bin`` shards. Each payload only tries to create a marker
file or connect to a socket the test listens on. Nothing is unpickled in the test process.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import run_cli

from ckptrescue.checkpoints.base import Verdict
from fixtures import malicious as mal

from .conftest import probe1

pytestmark = pytest.mark.needs_tool("bwrap")


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP socket on 127.0.0.1 that records whether anything connected."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.setblocking(False)
    yield srv
    srv.close()


def connected(srv: socket.socket) -> bool:
    try:
        conn, _ = srv.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


def build(tmp_path: Path, container: str, kind: str, marker: Path, port: int) -> Path:
    target = tmp_path / container / ("ckpt.pt" if container.startswith("torch") else "ckpt")
    target.parent.mkdir(parents=True, exist_ok=True)
    return mal.CONTAINERS[container](target, mal.payload(kind, marker=marker, port=port))


def cli(*args: str, timeout: float = 300) -> tuple[int | None, str, str]:
    res = run_cli(*args, timeout=timeout, clean_env=True)
    return res.returncode, res.stdout, res.stderr


@pytest.mark.parametrize("container", sorted(mal.CONTAINERS))
@pytest.mark.parametrize("kind", mal.KINDS)
def test_every_payload_in_every_container_is_unsafe_and_inert(tmp_path, listener, container,
                                                             kind):
    marker = tmp_path / "MARKER"
    path = build(tmp_path, container, kind, marker, listener.getsockname()[1])
    r = probe1(path, load=True)
    assert r.verdict is Verdict.UNSAFE, [f.title for f in r.findings]
    pk = [f for f in r.findings if f.code == "PK001"]
    assert pk, [f.code for f in r.findings]
    named = " ".join(f.title for f in pk)
    dotted = "torch.distributed.checkpoint.filesystem."
    expect = {"socket.connect": "socket.socket",
              "dcp-dotted-stack-global": dotted + "os.system",
              "dcp-dotted-global": dotted + "os.system",
              "dcp-dotted-popen": dotted + "os.popen",
              "dcp-dotted-pickle-loads": dotted + "pickle.loads"}.get(kind, kind)
    assert expect in named
    assert r.load is not None and r.load["status"] == "skipped"
    assert not marker.exists()
    assert not connected(listener)


def test_cli_probe_load_of_dotted_dcp_payload_is_unsafe(tmp_path, listener):
    """The issue's reproducer: a DCP whose .metadata names os.system through a dotted name
    under torch.distributed.checkpoint. was ``intact``, ran /bin/sh under --load and was
    recommended by rank."""
    marker = tmp_path / "MARKER"
    run = tmp_path / "run"
    run.mkdir()
    for step, kind in ((100, "dcp-dotted-stack-global"), (200, "dcp-dotted-global")):
        mal.dcp_dir(run / f"step_{step}", mal.payload(kind, marker=marker))
    code, out, err = cli("probe", "--json", "--load", str(run))
    assert code == 1, err
    checkpoints = json.loads(out)["checkpoints"]
    assert [c["verdict"] for c in checkpoints] == ["unsafe", "unsafe"]
    for c in checkpoints:
        pk = [f for f in c["findings"] if f["code"] == "PK001"]
        assert "torch.distributed.checkpoint.filesystem.os.system" in pk[0]["title"]
        assert c["load"]["status"] == "skipped"
    code, out, _ = cli("rank", "--json", str(run))
    assert json.loads(out)["resume_from"] is None
    assert not marker.exists()
    assert not connected(listener)


def _direct(path: Path, **extra: object):
    """The static scan bypassed on purpose: the sandbox child runs DCP's reader on the file."""
    from ckptrescue.effects.sandbox import run_child

    return run_child("torch_load", {"path": str(path), "loader": "dcp", "files": [],
                                    **extra}, inputs=[str(path)], timeout_s=300)


@pytest.mark.parametrize("kind", mal.KINDS)
def test_boundary_alone_stops_every_payload(tmp_path, listener, kind):
    """DCP's reader unpickles .metadata without weights_only: every payload would run. The
    audit hook refuses the forbidden global (pickle.find_class) and records it; nothing ran."""
    marker = tmp_path / "MARKER"
    path = mal.dcp_dir(tmp_path / "ckpt", mal.payload(kind, marker=marker,
                                                      port=listener.getsockname()[1]))
    out = _direct(path)
    assert out.status == "blocked", out
    events = [a["event"] for a in out.attempts]
    assert events and events[0] == "pickle.find_class"
    module = ("torch.distributed.checkpoint.filesystem" if kind.startswith("dcp")
              else "builtins" if kind == "socket.connect" else kind.split(".")[0])
    assert out.attempts[0]["args"][0] == repr(module)
    assert "os.system" not in events  # refused before anything was resolved
    assert not marker.exists()
    assert not connected(listener)


@pytest.mark.parametrize("kind", ["os.system", "posix.system", "subprocess.Popen",
                                  "subprocess.check_call", "socket.connect",
                                  "dcp-dotted-stack-global", "dcp-dotted-popen"])
def test_seccomp_alone_kills_the_loader(tmp_path, listener, kind):
    """Without the audit hook, the payload runs inside the child, and the kernel kills it at
    its first fork/exec or network socket (SIGSYS): an outcome ``blocked``."""
    marker = tmp_path / "MARKER"
    path = mal.dcp_dir(tmp_path / "ckpt", mal.payload(kind, marker=marker,
                                                      port=listener.getsockname()[1]))
    out = _direct(path, layers=["seccomp"])
    assert out.status == "blocked" and out.signal_name == "SIGSYS", out
    assert not marker.exists()
    assert not connected(listener)


@pytest.mark.parametrize("kind", ["os.system", "subprocess.check_call", "builtins.exec",
                                  "socket.connect"])
def test_namespaces_alone_keep_the_host_unchanged(tmp_path, listener, kind):
    """Without hook and seccomp, a program runs, but inside bubblewrap: the checkpoint is
    read-only, the rest of the host is not there, and there is no network."""
    path = tmp_path / "ckpt"
    marker = path / "MARKER"  # inside the (read-only) checkpoint directory
    mal.dcp_dir(path, mal.payload(kind, marker=marker, port=listener.getsockname()[1]))
    _direct(path, layers=[])
    assert not marker.exists()
    assert not connected(listener)


def test_file_swapped_after_the_scan_is_blocked_and_unsafe(tmp_path, listener):
    """A .metadata replaced between the static scan and the load (or any payload the scan
    missed): the probe maps the sandbox's ``blocked`` to LD005 and verdict ``unsafe``."""
    from ckptrescue.checkpoints.probes.checkpoint_load import load_in_sandbox
    from ckptrescue.checkpoints.rank import rank

    run = tmp_path / "run"
    marker = tmp_path / "MARKER"
    ckpt = mal.dcp_dir(run / "step_5", b"N")  # payload: NONE (a clean DCP)
    r = probe1(ckpt)
    assert r.verdict is Verdict.INTACT
    mal.poison_dcp(ckpt, mal.payload("dcp-dotted-stack-global", marker=marker))
    load_in_sandbox(r)
    assert r.verdict is Verdict.UNSAFE
    ld = [f for f in r.findings if f.code == "LD005"]
    assert ld and str(ld[0].severity) == "critical"
    assert "os.system" in ld[0].title and "pickle.find_class" in ld[0].title
    assert r.load["status"] == "blocked" and r.load["attempts"]
    assert rank(run, load=True).resume_from is None
    assert not marker.exists()


def test_clean_dcp_loads_in_the_sandbox(tmp_path):
    ckpt = mal.dcp_dir(tmp_path / "ckpt", b"N")
    r = probe1(ckpt, load=True)
    assert r.verdict is Verdict.INTACT and r.load["status"] == "ok", r.load
    assert r.load["result"]["tensors"] == 2


def test_unknown_dcp_global_refuses_the_load(tmp_path):
    """A global that is neither on the exact DCP list nor dangerous (a misspelt class): the
    load is refused (PK004) and the verdict is ``unreadable``, not ``intact``."""
    ckpt = mal.dcp_dir(tmp_path / "ckpt", mal.stack_glob(
        "torch.distributed.checkpoint.metadata", "Metadatx"))
    r = probe1(ckpt, load=True)
    assert r.verdict is Verdict.UNREADABLE
    assert [f for f in r.findings if f.code == "PK004" and "Metadatx" in f.title]
    assert r.load["status"] == "skipped"


def test_loader_disagreeing_with_intact_makes_it_unreadable(tmp_path, monkeypatch):
    """torch refuses a zip whose ``version`` record says 99; with the static version rule
    switched off (standing in for any rule the static checks do not know) they see nothing
    wrong. With --load the verdict is ``unreadable`` (LD007) and rank never recommends it."""
    from ckptrescue.checkpoints.formats import torch_zip_view
    from ckptrescue.checkpoints.rank import rank

    monkeypatch.setattr(torch_zip_view, "_version_problem", lambda fh, rec: None)

    run = tmp_path / "run"
    run.mkdir()
    bad = mal.torch_zip_edited(run / "step_9.pt", "version", b"99\n")
    assert probe1(bad).verdict is Verdict.INTACT
    r = probe1(bad, load=True)
    assert r.verdict is Verdict.UNREADABLE
    assert [f for f in r.findings if f.code == "LD007"]
    assert [f for f in r.findings if f.code == "LD002"]
    assert rank(run).resume_from == str(bad)  # static only: cannot know
    assert rank(run, load=True).resume_from is None


def test_sandbox_unavailable_never_runs_the_load(tmp_path, monkeypatch):
    from ckptrescue.effects import sandbox

    ckpt = mal.dcp_dir(tmp_path / "ckpt", b"N")
    monkeypatch.setattr(sandbox, "BWRAP", "bwrap-not-installed-here")
    r = probe1(ckpt, load=True)
    assert r.load["status"] == "sandbox-unavailable"
    ld = [f for f in r.findings if f.code == "LD006"]
    assert ld and "not run" in ld[0].title
    assert r.verdict is Verdict.INTACT


def _real_dcp_states() -> dict[str, dict]:
    """State dicts like real training runs write (integer generators only)."""
    import torch

    lin = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    with torch.no_grad():
        for p in lin.parameters():
            p.copy_(torch.arange(p.numel(), dtype=torch.float32).reshape(p.shape) / 8)
    adam = torch.optim.Adam(lin.parameters(), lr=1e-3)
    lin(torch.arange(8, dtype=torch.float32).reshape(2, 4)).sum().backward()
    adam.step()
    sgd = torch.optim.SGD(lin.parameters(), lr=0.125, momentum=0.5)
    sgd.step()
    return {
        "model_adam": {"model": lin.state_dict(), "optimizer": adam.state_dict(), "step": 2},
        "sgd": {"model": lin.state_dict(), "optim": sgd.state_dict()},
        "nested": {"a": {"b": {"c": torch.arange(6).reshape(2, 3),
                               "d": [torch.ones(2, dtype=torch.bfloat16), 3, "s"]}},
                   "raw": b"\x00\x01raw", "items": [1, 2.5, "x", None, True], "pair": (1, 2),
                   "i8": torch.arange(5, dtype=torch.int8), "flag": torch.tensor([True, False]),
                   "f16": torch.arange(3, dtype=torch.float16), "empty": torch.empty(0),
                   "c64": torch.arange(4, dtype=torch.float32).to(torch.complex64),
                   "t": torch.arange(12).reshape(3, 4).t(), "ba": bytearray(b"ab")},
    }


def test_real_dcp_metadata_uses_only_the_exact_list(tmp_path):
    import warnings

    import torch.distributed.checkpoint as dcp

    from ckptrescue.checkpoints.formats import pickle_scan

    for name, state in _real_dcp_states().items():
        d = tmp_path / name
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save(state, checkpoint_id=str(d))
        scan = pickle_scan.scan_pickle((d / ".metadata").read_bytes())
        off = scan.unsafe_globals(pickle_scan.dcp_allowed)
        # (Python 3.11.0-x pickle enum members by name: getattr, for those alone)
        assert off == [] or (off == ["builtins.getattr"] and scan.getattr_only_for_members()), \
            (name, off)
        assert "torch.distributed.checkpoint.metadata.Metadata" in scan.globals
        r = probe1(d)
        assert r.verdict is Verdict.INTACT, (name, [f.title for f in r.findings])


def test_exact_lists_have_no_prefixes_and_classify_danger():
    from ckptrescue.checkpoints.formats import pickle_scan

    assert not hasattr(pickle_scan, "DCP_ALLOWED_MODULES")
    for name in ("torch.distributed.checkpoint.filesystem.os.system",
                 "torch.distributed.checkpoint.metadata.os.system",
                 "torch.distributed.checkpoint.Foo", "torch.cuda.os.system"):
        assert not pickle_scan.dcp_allowed(name), name
    for name in ("os.system", "posix.system", "nt.system", "subprocess.Popen",
                 "subprocess.check_call", "builtins.exec", "builtins.eval", "socket.socket",
                 "runpy._run_code", "importlib.import_module", "pty.spawn", "torch.load",
                 "torch.distributed.checkpoint.filesystem.os.system",
                 "torch.distributed.checkpoint.filesystem.pickle.loads", "builtins.getattr",
                 # a dangerous module reached as another module's attribute
                 "torch.serialization.os", "torch.serialization.sys", "numpy.os"):
        assert pickle_scan.dangerous(name), name
    # no name on an exact list (a family's extra list neither) is a module of that kind
    from ckptrescue.checkpoints.families import families

    listed = set(pickle_scan.exact_allowed_globals()) | set(pickle_scan.STANDALONE_ALLOWED) \
        | set(pickle_scan.ACCELERATE_RNG_ALLOWED)
    for fam in families():
        listed |= set(getattr(fam, "allowed_globals", ()) or ())
    assert len(listed) > 100
    assert not [n for n in listed if n.rsplit(".", 1)[-1] in pickle_scan.DANGEROUS_MODULES]
    for name in ("torch.distributed.checkpoint.metadata.Metadatx", "__main__.Config",
                 "builtins.set", "numpy.core.multiarray._reconstruct"):
        assert not pickle_scan.dangerous(name), name
    allowed = pickle_scan.exact_allowed_globals()
    assert "torch.distributed.checkpoint.metadata.Metadata" in allowed
    assert all(not g.endswith(".") for g in allowed)


def test_cli_rank_load_never_recommends_what_the_loader_refuses(tmp_path, monkeypatch):
    """``ckptrescue rank --load``: the static verdict alone would recommend the newest file;
    the sandboxed real load refuses it, so the older loadable one is the answer. (A byteorder
    record of ``middle``: torch raises "Unknown endianness type"; the static byteorder rule is
    switched off, standing in for any rule the static checks do not know. The CLI runs
    in-process so the switch applies; the load itself runs in the sandbox child.)"""
    import torch
    from typer.testing import CliRunner

    from ckptrescue.checkpoints.formats import torch_zip_view
    from ckptrescue.cli.main import app

    run = tmp_path / "run"
    run.mkdir()
    good = run / "step_1.pt"
    torch.save({"w": torch.arange(12, dtype=torch.float32)}, good)
    bad = mal.torch_zip_edited(run / "step_9.pt", "byteorder", b"middle")
    assert probe1(bad).verdict is not Verdict.INTACT  # the real rule sees it
    monkeypatch.setattr(torch_zip_view, "_byteorder_problem", lambda fh, rec: None)
    cli_runner = CliRunner()
    res = cli_runner.invoke(app, ["rank", str(run), "--json"])
    assert json.loads(res.stdout)["resume_from"] == str(bad), res.output
    res = cli_runner.invoke(app, ["rank", str(run), "--load", "--json"])
    assert res.exit_code == 0, res.output
    answer = json.loads(res.stdout)
    assert answer["resume_from"] == str(good)
    verdicts = {c["path"]: c["verdict"] for c in answer["checkpoints"]}
    assert verdicts[str(bad)] == "unreadable"


def test_hf_index_naming_files_outside_its_directory(tmp_path):
    """A weight map that names ``/etc/shadow`` or ``../x``: reported (HF009, damaged), never
    bound into the loader's sandbox, and the load is skipped."""
    import torch
    from safetensors.torch import save_file

    ckpt = tmp_path / "hf"
    ckpt.mkdir()
    save_file({"a": torch.arange(4, dtype=torch.float32)}, str(ckpt / "model-00001-of-00001.safetensors"))
    (tmp_path / "outside.safetensors").write_bytes((ckpt / "model-00001-of-00001.safetensors").read_bytes())
    index = {"metadata": {}, "weight_map": {"a": "model-00001-of-00001.safetensors",
                                            "b": "/etc/shadow", "c": "../outside.safetensors"}}
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(index))
    r = probe1(ckpt / "model.safetensors.index.json", load=True)
    assert [f for f in r.findings if f.code == "HF009"]
    assert r.verdict is not Verdict.INTACT
    assert not any("shadow" in f or "outside" in f for f in r.files)
    assert r.load.get("status") != "ok" or all(str(ckpt) in f for f in r.files)
