"""A verdict checked against the real loaders on files the project's fixtures never wrote (#28).

Each case is written here by the real library (``torch.save`` with options the fixtures do not
use, ``safetensors``, ``tarfile``) or by hand at the byte level, and the real loader runs in a
child process (:data:`ORACLE`: ``torch.load(weights_only=True)``, safetensors' ``safe_open``,
``tarfile`` extraction then ``torch.load`` per member; for payload cases a ``pickle.Unpickler``
whose ``find_class`` only records the names it is asked for, so nothing resolves and nothing
runs). The kit must agree: ``intact`` only when the loader loads, with the dtype, shape and
bytes of every tensor the loader returns; ``unsafe`` whenever the real unpickler would resolve a
global off the exact list. Nothing is unpickled in this process.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from ckptrescue.checkpoints.base import Verdict

from .conftest import probe1

ORACLE = r"""
import hashlib, io, json, os, pickle, sys, tarfile, tempfile
import torch

def tmap(obj):
    out, todo = {}, [("", obj)]
    while todo:
        name, item = todo.pop()
        if isinstance(item, torch.Tensor):
            if item.layout != torch.strided or item.is_quantized:
                continue
            item = item.detach().resolve_conj().resolve_neg().contiguous()
            raw = item.reshape(-1).view(torch.uint8).numpy()
            out[name or "<root>"] = [str(item.dtype).removeprefix("torch."), list(item.shape),
                                     hashlib.sha256(memoryview(raw)).hexdigest()[:16]]
        elif isinstance(item, dict):
            todo.extend((f"{name}.{k}" if name else str(k), v) for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            todo.extend((f"{name}.{i}" if name else str(i), v) for i, v in enumerate(item))
    return out

class Recorder(pickle.Unpickler):
    def find_class(self, module, name):
        self.names.append(f"{module}.{name}")
        raise pickle.UnpicklingError("recorded, not resolved")

def load(kind, path):
    if kind == "torch":
        return tmap(torch.load(path, weights_only=True, map_location="cpu"))
    if kind == "safetensors":
        from safetensors import safe_open
        with safe_open(path, framework="pt") as f:
            return tmap({k: f.get_tensor(k) for k in f.keys()})
    if kind == "tar":
        out = {}
        with tempfile.TemporaryDirectory() as d:
            with tarfile.open(path) as t:
                t.extractall(d, filter="data")
            files = sorted(os.path.relpath(os.path.join(r, f), d)
                           for r, _, fs in os.walk(d) for f in fs)
            for rel in files:
                got = tmap(torch.load(os.path.join(d, rel), weights_only=True))
                out.update({(f"{rel}/{k}" if len(files) > 1 else k): v for k, v in got.items()})
        return out
    if kind == "globals":  # every global the plain unpickler asks for, pickle after pickle
        names, f = [], open(path, "rb")
        for _ in range(16):  # pickle.load called again while bytes remain (torch: five)
            u = Recorder(f)
            u.names = names
            try:
                u.load()
            except Exception:
                break
            if f.read(1) != b"\x80":
                break
            f.seek(-1, 1)
        return sorted(set(names))
    raise ValueError(kind)

for line in sys.stdin:
    kind, path = line.rstrip("\n").split("\t")
    try:
        print(json.dumps({"ok": True, "map": load(kind, path)}), flush=True)
    except BaseException as exc:
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}),
              flush=True)
"""


def oracle(items: list[tuple[str, Path]]) -> list[dict[str, Any]]:
    """The real loaders' answers, one child process for all the items."""
    proc = subprocess.run([sys.executable, "-c", ORACLE],
                          input="".join(f"{k}\t{p}\n" for k, p in items),
                          capture_output=True, text=True, timeout=600, check=True)
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(out) == len(items), proc.stderr[-3000:]
    return out


def static_map(report: Any) -> dict[str, list[Any]]:
    """The static map as the oracle describes tensors: dtype, shape and the digest of the bytes
    salvage would write."""
    from ckptrescue.checkpoints.probes.load_compare import _format
    from ckptrescue.checkpoints.salvage import tensor_digest

    reader = getattr(_format(report.format), "read_tensor_bytes", None)
    return {t.name: [t.dtype, list(t.shape or ()),
                     tensor_digest(t, report, Path(report.path), reader=reader)]
            for t in report.tensors}


def agree(path: Path, loaded: dict[str, Any]) -> Any:
    """Probe ``path`` and assert the verdict agrees with the loader's answer."""
    r = probe1(path)
    if loaded["ok"]:
        assert r.verdict in (Verdict.INTACT, Verdict.SUSPECT), (r.verdict, r.findings)
        assert static_map(r) == loaded["map"]
    else:
        assert r.verdict not in (Verdict.INTACT, Verdict.SUSPECT), (loaded, r.findings)
    return r


def _ar(n: int, dtype: Any = None) -> Any:
    import torch

    return torch.arange(n).to(dtype or torch.float32)


# -- legacy streams at every pickle protocol ---------------------------------------------------

@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_legacy_stream_at_any_pickle_protocol_is_judged_as_torch_loads_it(tmp_path, protocol):
    """``torch.save(..., _use_new_zipfile_serialization=False, pickle_protocol=N)``: at 3 the
    stream was read as a bare pickle (intact, no tensor verified); at 4 and 5 (FRAME opcodes the
    weights-only unpickler does not implement) it was intact where torch.load refuses."""
    import torch

    path = tmp_path / f"legacy-p{protocol}.pt"
    base = _ar(24).reshape(4, 6)
    torch.save({"w": base, "row": base[1], "b": _ar(5, torch.int64)}, path,
               _use_new_zipfile_serialization=False, pickle_protocol=protocol)
    [loaded] = oracle([("torch", path)])
    assert loaded["ok"] is (protocol <= 3), loaded
    r = agree(path, loaded)
    assert r.format == "torch-legacy"
    if loaded["ok"]:
        assert {t.name for t in r.tensors} == {"w", "row", "b"}
    else:
        assert "PK007" in {f.code for f in r.findings}


# -- tar archives: legacy members, payloads, members of the same name --------------------------

def _legacy_bytes(obj: Any, sys_info: bytes | None = None) -> bytes:
    """A legacy stream; ``sys_info`` replaces its third pickle (torch.load reads all five)."""
    import pickletools

    import torch

    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=False)
    raw = buf.getvalue()
    f = io.BytesIO(raw)
    bounds = []
    for _ in range(5):
        start = f.tell()
        for _op in pickletools.genops(f):
            pass
        bounds.append((start, f.tell()))
    parts = [raw[s:e] for s, e in bounds]
    if sys_info is not None:
        parts[2] = sys_info
    return b"".join(parts) + raw[bounds[4][1]:]


def _tar(path: Path, members: list[tuple[str, bytes]], mode: str = "w") -> Path:
    with tarfile.open(path, mode) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tf.addfile(info, io.BytesIO(data))
    return path


PAYLOAD = b"\x80\x02cos\nsystem\n(S'true'\ntR."  # os.system('true'): never run here


@pytest.mark.parametrize("mode", ["w", "w:gz"])
def test_legacy_stream_in_a_tar_is_probed_and_its_every_pickle_judged(tmp_path, mode):
    """A tar member that is a legacy torch.save stream: its tensors are verified in place (plain
    tar) and all five of its pickles are judged - a payload in the third (``sys_info``) made the
    archive ``intact``, though torch.load(weights_only=False) resolves and calls it."""
    ext = ".tar.gz" if mode == "w:gz" else ".tar"
    good = _tar(tmp_path / f"legacy{ext}", [("m.pt", _legacy_bytes({"w": _ar(6)}))], mode)
    bad = _tar(tmp_path / f"payload{ext}",
               [("m.pt", _legacy_bytes({"w": _ar(6)}, sys_info=PAYLOAD))], mode)
    payload_file = tmp_path / "payload.pkl"
    payload_file.write_bytes(_legacy_bytes({"w": _ar(6)}, sys_info=PAYLOAD))
    loaded, resolved = oracle([("tar", good), ("globals", payload_file)])
    assert loaded["ok"] and "os.system" in resolved["map"], (loaded, resolved)
    r = probe1(good)
    assert r.verdict is Verdict.INTACT, r.findings
    if mode == "w":  # in place: the map is torch's, byte for byte
        assert static_map(r) == loaded["map"]
    r = probe1(bad)
    assert r.verdict is Verdict.UNSAFE, r.findings
    assert "os.system" in r.extra["unsafe_globals"]


def test_tar_members_of_one_name_keep_the_last_as_extraction_does(tmp_path):
    """Two members named ``step.pt``: extraction keeps the last. The map holds only its tensors
    (both members' names collided, and salvage wrote a safetensors file safetensors refuses);
    the earlier member is reported (TA006), its damage is not the checkpoint's, and a payload
    in it still makes the archive unsafe."""
    import torch

    a, b = io.BytesIO(), io.BytesIO()
    torch.save({"w": _ar(12)}, a)
    torch.save({"w": _ar(12) + 100, "n": _ar(3, torch.int64)}, b)
    path = _tar(tmp_path / "dup.tar", [("step.pt", a.getvalue()), ("step.pt", b.getvalue())])
    payload = _tar(tmp_path / "dup-payload.tar",
                   [("step.pt", PAYLOAD), ("step.pt", b.getvalue())])
    [loaded] = oracle([("tar", path)])
    r = probe1(path)
    assert r.verdict is Verdict.SUSPECT and "TA006" in {f.code for f in r.findings}
    assert static_map(r) == loaded["map"]
    assert probe1(payload).verdict is Verdict.UNSAFE

    from ckptrescue.checkpoints.salvage import salvage

    out = salvage(path, tmp_path / "out", allow_next_to_input=True)
    [written] = oracle([("safetensors", Path(out.output))])
    assert written["ok"] and written["map"] == loaded["map"], written
