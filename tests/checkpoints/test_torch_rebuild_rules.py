"""``intact`` only where ``torch.load`` agrees (issue 28): the static reader follows the
weights-only loader's own rules - the storage cache by key, ``set_``'s size/stride/offset
checks, the rebuild functions' arguments, BUILD targets - and ``probe --load`` compares the
loaded tensors' dtype, shape and bytes with the static map.

Every case (``fixtures/torch_pickles.py``) is a real ``torch.save`` zip whose ``data.pkl`` was
rewritten opcode by opcode; the oracle is ``torch.load(weights_only=True)`` in a child process
(these files carry no payload; nothing is loaded in this process).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import warm_python

from ckptrescue.checkpoints.base import Verdict
from fixtures import torch_pickles as tp

from .conftest import probe1

ORACLE = r"""
import hashlib, json, sys
import torch

def flat(obj, pre=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from flat(v, f"{pre}{k}.")
    elif isinstance(obj, torch.Tensor):
        yield pre.rstrip("."), obj

for path in sys.argv[1:]:
    try:
        obj = torch.load(path, weights_only=True)
        out = {n: [str(t.dtype).removeprefix("torch."), list(t.shape), hashlib.sha256(
            t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        ).hexdigest()[:16]] for n, t in flat(obj)}
        print(json.dumps({"ok": True, "tensors": out}))
    except BaseException as exc:
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:4000]}))
"""


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    """Every case written once and loaded once by the real loader (one child process)."""
    root = tmp_path_factory.mktemp("rebuild")
    base = tp.torch_save_bytes()
    paths = {name: tp.write(root / f"{name}.pt", name, base) for name in tp.CASES}
    proc = warm_python.run(ORACLE, *map(str, paths.values()), cwd=os.getcwd(), env=os.environ)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    return {name: (path, res) for (name, path), res in zip(paths.items(), results, strict=True)}


@pytest.mark.parametrize("name", sorted(tp.CASES))
def test_static_verdict_agrees_with_the_real_loader(cases, name):
    path, loaded = cases[name]
    expected = tp.CASES[name][1]
    # the fixture's expectation is the real loader's behaviour (checked, not assumed)
    assert loaded["ok"] == (expected is None), loaded
    if expected is not None:
        assert expected in loaded["error"], loaded["error"]
    r = probe1(path)
    codes = {f.code for f in r.findings}
    if loaded["ok"]:
        # what the loader built is what the static map says, tensor by tensor
        static = {t.name: (t.dtype, list(t.shape or ())) for t in r.tensors}
        assert static == {n: (d, s) for n, (d, s, _h) in loaded["tensors"].items()}
        assert r.verdict in (Verdict.INTACT, Verdict.SUSPECT), r.findings
    else:
        assert r.verdict is not Verdict.INTACT and r.verdict is not Verdict.SUSPECT, \
            (r.verdict, r.findings)
        assert codes & {"PK011", "PK002", "TZ004"}, r.findings


def test_shared_storage_key_loads_as_the_first_type_and_salvage_writes_what_torch_gives(
        cases, tmp_path):
    from safetensors import safe_open

    from ckptrescue.checkpoints.salvage import salvage

    path, loaded = cases["shared-key-two-types"]
    r = probe1(path)
    assert {t.name: t.dtype for t in r.tensors} == {"a": "int32", "b": "int32"}
    assert r.verdict is Verdict.SUSPECT  # torch.save never writes it: the conflict is named
    assert [f for f in r.findings if f.code == "PK012" and "int32" in f.title]
    out = salvage(path, tmp_path / "out")
    with safe_open(out.output, "np") as f:
        for name in ("a", "b"):
            arr = f.get_tensor(name)
            assert str(arr.dtype) == "int32"
            assert hashlib.sha256(arr.tobytes()).hexdigest()[:16] == loaded["tensors"][name][2]


def test_junk_before_the_first_record_is_not_intact(tmp_path):
    """torch.load only reads a file as a zip when its first four bytes are a local header."""
    base = tp.torch_save_bytes()
    path = tmp_path / "junk.pt"
    path.write_bytes(bytes(range(256)) * 2 + base)
    proc = warm_python.run(ORACLE, str(path), cwd=os.getcwd(), env=os.environ, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not json.loads(proc.stdout)["ok"]
    r = probe1(path)
    assert r.verdict is not Verdict.INTACT
    assert "TZ022" in {f.code for f in r.findings}


def test_unknown_safetensors_dtype_is_not_intact(tmp_path):
    """A sub-byte code the header grammar accepts but no loader understands (F6_E2M3):
    safetensors refuses the file, so it is never intact."""
    import struct

    header = json.dumps({"x": {"dtype": "F6_E2M3", "shape": [4], "data_offsets": [0, 3]},
                         "y": {"dtype": "F32", "shape": [1], "data_offsets": [3, 7]}}).encode()
    header += b" " * (-len(header) % 8)
    path = tmp_path / "f6.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(7))
    check = ("import sys\nfrom safetensors.torch import load_file\n"
             "try:\n    load_file(sys.argv[1]); print('ok')\n"
             "except Exception as e:\n    print(e)\n")
    proc = warm_python.run(check, str(path), cwd=os.getcwd(), env=os.environ, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Dtype not understood" in proc.stdout
    r = probe1(path)
    assert r.verdict is not Verdict.INTACT
    assert [f for f in r.findings if f.code == "ST003" and "F6_E2M3" in f.title]


@pytest.mark.needs_tool("bwrap")
def test_load_compares_the_loaded_tensors_with_the_static_map(cases, monkeypatch, request):
    """With the storage-cache rule switched off (standing in for any rule the static reader
    does not know), the static map says ``a`` is float32; the sandboxed load gives int32 and
    ``probe --load`` says so (LD008) instead of ``intact``/``load: ok``."""
    from ckptrescue.checkpoints.formats import pickle_roots, torch_rebuild

    path, _ = cases["plain"]
    ok = probe1(path, load=True)
    assert ok.verdict is Verdict.INTACT and ok.load["status"] == "ok", ok.load
    assert ok.load["compared"]["compared"] == 1

    path, _ = cases["shared-key-two-types"]
    monkeypatch.setattr(torch_rebuild.TorchRules, "on_persistent", lambda self, ref: None)
    # the scans kept under the real rules (other tests probed this file) go, and so do the
    # scans made without the rule, when the test ends
    pickle_roots.forget()
    request.addfinalizer(pickle_roots.forget)
    static = probe1(path)
    assert static.verdict is Verdict.INTACT  # what the kit said before it knew the rule
    r = probe1(path, load=True)
    assert r.load["status"] == "ok"
    mismatch = [f for f in r.findings if f.code == "LD008"]
    assert mismatch and mismatch[0].tensors == ("a",), r.findings
    assert "int32" in mismatch[0].title
    assert r.verdict is Verdict.SUSPECT
    assert next(t for t in r.tensors if t.name == "a").status == "suspect"
