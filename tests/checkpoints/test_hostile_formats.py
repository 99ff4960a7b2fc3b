"""Hostile safetensors / HDF5 / HF-shard inputs and salvage (issue 14): total parsers, the real
loader as the oracle, and salvage that never launders damage.

Every input is generated here from integers (numpy ``arange`` arithmetic: no CPU-dependent math,
no clock). The oracles (safetensors' own ``load_file``, h5py) run in a child interpreter over a
batch of files, so one crashing library call cannot take the test process with it.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
from cli_helpers import run_cli

from ckptrescue.checkpoints.base import ProbeOptions, Verdict
from ckptrescue.checkpoints.probes.checkpoints import discover, probe_one, probe_paths
from ckptrescue.checkpoints.salvage import salvage

REPO = Path(__file__).resolve().parents[2]


# ---- generators ------------------------------------------------------------------------------

def tensors() -> dict[str, np.ndarray]:
    """Three tensors from integers: floats from a small integer grid, an int64 counter."""
    i = np.arange(4096, dtype=np.int64)
    return {
        "layer.weight": (((i * 37) % 201) - 100).astype(np.float32).reshape(64, 64) / 128,
        "layer.bias": ((i[:64] % 13) + 1).astype(np.float32) / 16,
        "step": np.array([1200], dtype=np.int64),
    }


_ST = {np.dtype("float32"): "F32", np.dtype("int64"): "I64"}


def st_bytes(ts: dict[str, np.ndarray], *, meta: dict | None = None, pad: int = 8) -> bytes:
    header: dict = {}
    blobs, pos = [], 0
    for name, arr in ts.items():
        raw = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": _ST[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [pos, pos + len(raw)]}
        blobs.append(raw)
        pos += len(raw)
    if meta is not None:
        header["__metadata__"] = meta
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % pad)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def probe_file(path: Path, *, numeric: bool = True):  # noqa: ANN201
    [(fmt, root)] = discover([path])
    return probe_one(fmt, root, ProbeOptions(numeric=numeric))


# ---- the oracle ------------------------------------------------------------------------------

_ORACLE = r"""
import hashlib, json, sys
kind = sys.argv[1]
for path in sys.argv[2:]:
    try:
        if kind == "safetensors":
            from safetensors.numpy import load_file
            arrays = load_file(path)
        else:
            import h5py
            arrays = {}
            with h5py.File(path, "r") as f:
                f.visititems(lambda n, o: arrays.__setitem__(n, o[()])
                             if isinstance(o, h5py.Dataset) else None)
        out = {k: hashlib.sha256(v.tobytes()).hexdigest() for k, v in arrays.items()}
        print(json.dumps({"path": path, "ok": True, "tensors": out}), flush=True)
    except BaseException as exc:  # noqa: BLE001
        print(json.dumps({"path": path, "ok": False, "error": repr(exc)[:200]}), flush=True)
"""


def oracle(kind: str, paths: list[Path]) -> dict[str, dict]:
    """The real library's view of each file; a file it crashed on is ``ok: False``."""
    results: dict[str, dict] = {}
    todo = [str(p) for p in paths]
    while todo:
        proc = subprocess.run([sys.executable, "-c", _ORACLE, kind, *todo], capture_output=True,
                              text=True, timeout=300, check=False)
        for line in proc.stdout.splitlines():
            item = json.loads(line)
            results[item["path"]] = item
        done = [p for p in todo if p in results]
        rest = todo[len(done):]
        if rest and proc.returncode != 0:  # the library crashed on rest[0]
            results[rest[0]] = {"path": rest[0], "ok": False, "error": "crashed"}
            rest = rest[1:]
        todo = rest
    return results


def sha_at(path: Path, offset: int, length: int) -> str:
    import hashlib

    with path.open("rb") as fh:
        fh.seek(offset)
        return hashlib.sha256(fh.read(length)).hexdigest()


def assert_intact_means_loadable(kind: str, reports: dict[Path, object]) -> None:
    intact = [p for p, r in reports.items() if r.verdict is Verdict.INTACT]  # type: ignore[attr-defined]
    views = oracle(kind, intact)
    for p in intact:
        view = views[str(p)]
        assert view["ok"], f"{p.name}: intact, but the real loader refuses it: {view}"
        rep = reports[p]
        mine = {t.name: sha_at(p, t.offset, t.length) for t in rep.tensors}  # type: ignore[attr-defined]
        assert mine == view["tensors"], f"{p.name}: the loader reads other bytes"


# ---- safetensors -----------------------------------------------------------------------------

def test_header_nested_50000_deep_is_a_finding_not_a_crash(tmp_path: Path) -> None:
    text = b'{"a":' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    path = tmp_path / "deep.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text)
    r = probe_file(path)
    assert r.verdict is Verdict.DAMAGED and [f.code for f in r.findings] == ["ST010"]


def _st_mutants(seed: bytes) -> dict[str, bytes]:
    (n,) = struct.unpack_from("<Q", seed)
    header = seed[8:8 + n]
    out: dict[str, bytes] = {"seed": seed}
    cuts = {0, 4, 7, 8, 9, 8 + n // 2, 8 + n - 1, 8 + n, 8 + n + 1, len(seed) - 1}
    base, pos = 8 + n, 0
    for arr in tensors().values():
        pos += arr.nbytes
        cuts |= {base + pos - 1, base + pos, base + pos + 1}
    for c in sorted(cuts):
        if c < len(seed):
            out[f"cut{c}"] = seed[:c]
    for bit in range(0, 64, 7):  # flips in the header length
        out[f"n-bit{bit}"] = struct.pack("<Q", n ^ (1 << bit)) + seed[8:]
    for value in (0, 1, 2, 2 ** 63, 2 ** 64 - 1, 100_000_001):
        out[f"n={value}"] = struct.pack("<Q", value) + seed[8:]
    digits = [i for i, c in enumerate(header) if chr(c).isdigit()]
    for k, i in enumerate(digits[:: max(1, len(digits) // 12)]):  # flips in offsets/shapes
        out[f"digit{k}"] = seed[:8 + i] + bytes([header[i] ^ 0x01]) + seed[9 + i:]
    for k, i in enumerate(j for j, c in enumerate(header) if c in b'{}[]:,"'):
        if k % 5 == 0:
            out[f"punct{k}"] = seed[:8 + i] + b"x" + seed[9 + i:]
    ts = tensors()
    for value in (2 ** 64 - 1, 2 ** 64, -1, 1.5, True, "12", 10 ** 30):
        h = json.loads(header)
        h["step"]["data_offsets"][1] = value
        text = json.dumps(h).encode()
        out[f"offset={value!r}"] = struct.pack("<Q", len(text)) + text + seed[8 + n:]
        h = json.loads(header)
        h["layer.bias"]["shape"] = [value]
        text = json.dumps(h).encode()
        out[f"shape={value!r}"] = struct.pack("<Q", len(text)) + text + seed[8 + n:]
    out["leading-space"] = struct.pack("<Q", n) + b" " + header[:-1] + seed[8 + n:]
    out["meta-int"] = st_bytes(ts, meta={"format": 1})  # type: ignore[dict-item]
    out["meta-str"] = st_bytes(ts, meta={"format": "pt"})
    out["trailing"] = seed + b"\x00"
    out["dtype-bogus"] = seed.replace(b'"I64"', b'"I65"')
    return out


def test_safetensors_mutants_never_crash_and_intact_means_loadable(tmp_path: Path) -> None:
    seed = st_bytes(tensors())
    reports = {}
    for name, data in _st_mutants(seed).items():
        path = tmp_path / f"{name.replace('/', '_')}.safetensors"
        path.write_bytes(data)
        found = discover([path])
        assert len(found) == 1
        fmt, root = found[0]
        reports[path] = probe_one(fmt, root, ProbeOptions(numeric=False))
    assert reports[tmp_path / "seed.safetensors"].verdict is Verdict.INTACT
    assert reports[tmp_path / "meta-str.safetensors"].verdict is Verdict.INTACT
    assert reports[tmp_path / "meta-int.safetensors"].verdict is Verdict.DAMAGED
    assert reports[tmp_path / "leading-space.safetensors"].verdict is not Verdict.INTACT
    assert_intact_means_loadable("safetensors", reports)
    # and the other way round: what the loader refuses is never intact (checked above for the
    # intact ones; here the loader's view of every mutant, sampled, for the record)
    views = oracle("safetensors", list(reports)[::3])
    for p, view in views.items():
        if not view["ok"]:
            assert reports[Path(p)].verdict is not Verdict.INTACT


# ---- HDF5 ------------------------------------------------------------------------------------

def h5_seed(path: Path) -> Path:
    import h5py

    with h5py.File(path, "w", libver="earliest") as f:
        for name, arr in tensors().items():
            f.create_dataset(name.replace(".", "/"), data=arr)
        f.attrs["backend"] = "tensorflow"
    return path


def test_truncated_h5_names_what_it_cannot_read(tmp_path: Path) -> None:
    data = h5_seed(tmp_path / "seed.h5").read_bytes()
    tmp_path = tmp_path / "in"  # inputs in their own folder: salvage writes next to it
    tmp_path.mkdir()
    cut = tmp_path / "cut.h5"
    cut.write_bytes(data[: len(data) - 1024])
    r = probe_file(cut)
    assert r.verdict is Verdict.TRUNCATED and r.tensors  # the datasets before the cut
    out = salvage(cut, tmp_path.parent / "out" / "a")
    assert (out.lost or out.unaccounted) and not out.clean
    # a cut through a dataset's bytes: that dataset is named as lost, or (when the group
    # structure lay past the cut, as h5py writes it) H5006 says nothing could be named
    half = tmp_path / "half.h5"
    half.write_bytes(data[: len(data) // 2])
    r = probe_file(half)
    assert r.verdict is Verdict.TRUNCATED
    assert any(t.status in ("truncated", "damaged") for t in r.tensors) or \
        "H5006" in {f.code for f in r.findings}
    out = salvage(half, tmp_path.parent / "out" / "c")
    assert not out.clean
    # cut inside the superblock's reach: nothing can be named, and salvage says so
    tiny = tmp_path / "tiny.h5"
    tiny.write_bytes(data[:600])
    r = probe_file(tiny)
    assert r.verdict is Verdict.TRUNCATED and "H5006" in {f.code for f in r.findings}
    out = salvage(tiny, tmp_path.parent / "out" / "b")
    assert not out.recovered and not out.clean


def _run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*argv, timeout=300, cwd=REPO)


def test_salvage_of_nothing_never_exits_0(tmp_path: Path) -> None:
    data = h5_seed(tmp_path / "seed.h5").read_bytes()
    (tmp_path / "in").mkdir()
    tiny = tmp_path / "in" / "tiny.h5"
    tiny.write_bytes(data[:600])
    proc = _run_cli("salvage", str(tiny), str(tmp_path / "out"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "nothing was recovered" in proc.stdout


def _h5_mutants(seed: bytes) -> dict[str, bytes]:
    out = {"seed": seed}
    for c in (0, 8, 64, 96, 512, 800, 1400, 2048, len(seed) // 2, len(seed) - 8, len(seed) - 1):
        if c < len(seed):
            out[f"cut{c}"] = seed[:c]
    for pos in list(range(8, 96, 5)) + list(range(96, len(seed), max(1, len(seed) // 40))):
        for bit in (0, 6):
            b = bytearray(seed)
            b[pos] ^= 1 << bit
            out[f"flip{pos}.{bit}"] = bytes(b)
    for pos in (24, 32, 40):  # superblock addresses (base, free space, end of file): extremes
        for value in (2 ** 63, 2 ** 64 - 1, 0):
            b = bytearray(seed)
            b[pos:pos + 8] = value.to_bytes(8, "little")
            out[f"addr{pos}={value}"] = bytes(b)
    return out


_PROBE_H5 = r"""
import json, sys
from pathlib import Path
from ckptrescue.checkpoints.base import ProbeOptions
from ckptrescue.checkpoints.probes.checkpoints import discover, probe_one
for p in sys.argv[1:]:
    [(fmt, root)] = discover([Path(p)])
    r = probe_one(fmt, root, ProbeOptions(numeric=False))
    print(json.dumps({"path": p, "verdict": str(r.verdict), "tensors": [
        [t.name, t.offset, t.length, t.status] for t in r.tensors]}), flush=True)
"""


def test_h5_mutants_never_crash_and_intact_means_loadable(tmp_path: Path) -> None:
    seed = h5_seed(tmp_path / "seed.h5").read_bytes()
    paths = []
    for name, data in _h5_mutants(seed).items():
        p = tmp_path / f"m-{name}.h5"
        p.write_bytes(data)
        paths.append(p)
    # h5py runs inside the probe: probe the mutants in a child so that a library crash is a
    # failed assertion here, not a dead test run
    proc = subprocess.run([sys.executable, "-c", _PROBE_H5, *map(str, paths)],
                          capture_output=True, text=True, timeout=600, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    probed = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(probed) == len(paths)
    by = {Path(x["path"]): x for x in probed}
    assert by[tmp_path / "m-seed.h5"]["verdict"] == "intact"
    intact = [p for p, x in by.items() if x["verdict"] == "intact"]
    views = oracle("h5", intact)
    for p in intact:
        view = views[str(p)]
        assert view["ok"], f"{p.name}: intact, but h5py refuses it: {view}"
        mine = {n: sha_at(p, off, ln) for n, off, ln, _ in by[p]["tensors"] if off is not None}
        assert {n: view["tensors"][n] for n in mine} == mine, f"{p.name}: other bytes"


# ---- Hugging Face shard detection ------------------------------------------------------------

def test_dataset_shards_are_not_a_sharded_checkpoint(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "data").mkdir(parents=True)
    for i in range(3):
        (run / "data" / f"train-{i:05d}-of-00003.parquet").write_bytes(b"PAR1" + bytes(64))
        (run / "data" / f"data_tfrecord-{i:05d}-of-00003.gz").write_bytes(b"\x1f\x8b" + bytes(30))
    (run / "step_1").mkdir()
    (run / "step_1" / "model.safetensors").write_bytes(st_bytes(tensors()))
    reports = probe_paths([run], numeric=False)
    assert [(Path(r.path).name, r.format) for r in reports] == [
        ("model.safetensors", "safetensors")]
    from ckptrescue.checkpoints.rank import rank

    result = rank(run)
    assert [Path(c.path).name for c in result.checkpoints] == ["step_1"]


def test_weight_shards_without_index_are_still_claimed(tmp_path: Path) -> None:
    d = tmp_path / "ckpt"
    d.mkdir()
    ts = tensors()
    names = list(ts)
    for i, name in enumerate(names[:2]):
        (d / f"model-{i + 1:05d}-of-00003.safetensors").write_bytes(st_bytes({name: ts[name]}))
    [r] = probe_paths([d], numeric=False)
    assert r.format == "hf-sharded" and r.verdict is Verdict.INCOMPLETE


# ---- salvage never launders damage -----------------------------------------------------------

def test_salvage_keeps_numerically_suspect_tensors_apart(tmp_path: Path) -> None:
    ts = tensors()
    flipped = ts["layer.weight"].copy()
    flipped.view(np.uint32).reshape(-1)[100] ^= 1 << 30  # an exponent flip
    data = bytearray(st_bytes({**ts, "layer.weight": flipped}))
    # a zeroed, file-aligned 4 KiB page inside a second big tensor
    big = (((np.arange(8192, dtype=np.int64) * 29) % 97) + 3).astype(np.float32) / 8
    data = bytearray(st_bytes({**ts, "layer.weight": flipped, "other.weight": big}))
    (n,) = struct.unpack_from("<Q", data)
    start = 8 + n + sum(a.nbytes for a in ts.values())
    page = (start + 4095) // 4096 * 4096 + 4096
    data[page:page + 4096] = bytes(4096)
    (tmp_path / "in").mkdir()
    src = tmp_path / "in" / "model.safetensors"
    src.write_bytes(bytes(data))
    probed = probe_file(src)
    assert set(probed.suspect_tensors) == {"layer.weight", "other.weight"}
    result = salvage(src, tmp_path / "out")
    assert result.source_verdict == "suspect"
    assert sorted(x["name"] for x in result.suspect) == ["layer.weight", "other.weight"]
    assert "layer.weight" not in result.recovered and "other.weight" not in result.recovered
    assert not result.clean
    saved = json.loads((tmp_path / "out" / "salvage.json").read_text())
    assert saved["suspect"] and saved["clean"] is False
    from safetensors.numpy import load_file

    assert set(load_file(result.output)) == {"layer.bias", "step"}
    assert set(load_file(result.suspect_output)) == {"layer.weight", "other.weight"}
    proc = _run_cli("salvage", str(src), str(tmp_path / "out2"))
    assert proc.returncode == 1 and "suspect layer.weight" in proc.stdout


def test_clean_salvage_exits_0(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    src = tmp_path / "in" / "model.safetensors"
    src.write_bytes(st_bytes(tensors()))
    result = salvage(src, tmp_path / "out")
    assert result.clean and sorted(result.recovered) == sorted(tensors())
    assert result.source_verdict == "intact"
