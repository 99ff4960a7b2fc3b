"""Legacy torch.save streams, safetensors files, HF sharded sets and DCP directories.

Fixtures: real saves (``torch.save(..., _use_new_zipfile_serialization=False)``,
``safetensors.torch.save_file``, ``torch.distributed.checkpoint.save`` in one process, and an
HF-style index + shards) of the same small training state; damage applied to copies.
"""

from __future__ import annotations

import json
import os
import struct

from ckptrescue.checkpoints.base import Verdict
from fixtures import checkpoints as fx

from .conftest import probe1


def codes(report):
    return [f.code for f in report.findings]


def test_legacy_intact_names(base):
    r = probe1(base["legacy"])
    assert r.format == "torch-legacy" and r.verdict is Verdict.INTACT
    assert {t.name for t in r.tensors} == set(base["flat"])
    assert {t.status for t in r.tensors} == {"unverified"}


def test_legacy_truncated(base, tmp_path):
    bad = fx.copy(base["legacy"], tmp_path / "leg.pt")
    r0 = probe1(base["legacy"])
    t = next(t for t in r0.tensors if t.name == "optimizer.state.2.exp_avg")
    fx.truncate(bad, t.offset + 8)
    r = probe1(bad)
    assert r.verdict is Verdict.TRUNCATED and "TL001" in codes(r)
    assert "optimizer.state.2.exp_avg" in r.damaged_tensors
    assert "model.0.weight" not in r.damaged_tensors + r.missing_tensors


def test_safetensors_intact_and_located(base):
    from safetensors import safe_open

    r = probe1(base["safetensors"])
    assert r.format == "safetensors" and r.verdict is Verdict.INTACT
    n = struct.unpack("<Q", base["safetensors"].read_bytes()[:8])[0]
    with safe_open(str(base["safetensors"]), "pt") as f:
        keys = set(f.keys())
    assert {t.name for t in r.tensors} == keys
    hdr = json.loads(base["safetensors"].read_bytes()[8:8 + n])
    for t in r.tensors:
        assert t.offset == 8 + n + hdr[t.name]["data_offsets"][0]


def test_safetensors_truncated_keeps_complete_tensors(base, tmp_path):
    bad = fx.copy(base["safetensors"], tmp_path / "cut.safetensors")
    fx.truncate(bad, bad.stat().st_size - 10)
    r = probe1(bad)
    assert r.verdict is Verdict.TRUNCATED and "ST007" in codes(r)
    last = max(r.tensors, key=lambda t: t.offset)
    assert r.damaged_tensors == [last.name]


def test_safetensors_overlap_and_hole(tmp_path):
    def write(path, header, data):
        text = json.dumps(header).encode()
        path.write_bytes(struct.pack("<Q", len(text)) + text + data)
        return path

    ov = write(tmp_path / "ov.safetensors",
               {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12))
    assert "ST005" in codes(probe1(ov))
    hole = write(tmp_path / "hole.safetensors",
                 {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                  "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}}, bytes(12))
    assert "ST006" in codes(probe1(hole))
    bad = write(tmp_path / "shape.safetensors",
                {"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, bytes(8))
    r = probe1(bad)
    assert "ST004" in codes(r) and r.damaged_tensors == ["a"]


def test_unidentifiable_files(tmp_path):
    lfs = tmp_path / "model.pt"
    lfs.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:" + "ab" * 32
                   + "\nsize 1234\n")
    r = probe1(lfs)
    assert r.verdict is Verdict.UNREADABLE and "Git-LFS pointer" in r.findings[0].title
    html = tmp_path / "model.bin"
    html.write_text("<!DOCTYPE html><html><body>403</body></html>")
    assert "HTML" in probe1(html).findings[0].title
    (tmp_path / "empty.pt").write_bytes(b"")
    assert probe1(tmp_path / "empty.pt").verdict is Verdict.UNREADABLE


def test_hf_sharded(base, tmp_path):
    r = probe1(base["hf"])
    assert r.format == "hf-sharded" and r.verdict is Verdict.INTACT
    assert {t.name for t in r.tensors} == set(fx.flatten(base["state"]["model"]))
    rb = probe1(base["hf_bin"])
    assert rb.verdict is Verdict.INTACT and rb.tensors_total == r.tensors_total

    gone = fx.copy(base["hf"], tmp_path / "missing")
    index = json.loads((gone / "model.safetensors.index.json").read_text())
    os.remove(gone / "model-00002-of-00003.safetensors")
    r = probe1(gone)
    assert r.verdict is Verdict.INCOMPLETE and "HF001" in codes(r)
    assert set(r.missing_tensors) == {k for k, v in index["weight_map"].items()
                                      if v == "model-00002-of-00003.safetensors"}

    noidx = fx.copy(base["hf"], tmp_path / "noindex")
    os.remove(noidx / "model.safetensors.index.json")
    r = probe1(noidx)
    assert r.verdict is Verdict.INCOMPLETE and "HF006" in codes(r)

    stale = fx.copy(base["hf"], tmp_path / "stale")
    index["weight_map"]["ghost.weight"] = "model-00001-of-00003.safetensors"
    (stale / "model.safetensors.index.json").write_text(json.dumps(index))
    r = probe1(stale)
    assert "HF002" in codes(r) and r.missing_tensors == ["ghost.weight"]


def _dcp_item(directory, fqn):
    from torch.distributed.checkpoint import FileSystemReader

    md = FileSystemReader(str(directory)).read_metadata()
    for k, v in md.storage_data.items():
        if k.fqn == fqn:
            return directory / v.relative_path, v.offset, v.length
    raise KeyError(fqn)


def test_dcp(base, tmp_path):
    r = probe1(base["dcp"])
    assert r.format == "dcp" and r.verdict is Verdict.INTACT
    names = {t.name for t in r.tensors}
    assert names == {n for n in base["flat"] if n.startswith(("model.", "optimizer.state."))}

    nometa = fx.copy(base["dcp"], tmp_path / "nometa")
    os.remove(nometa / ".metadata")
    r = probe1(nometa)
    assert r.verdict is Verdict.INCOMPLETE and codes(r) == ["DC001"]

    cut = fx.copy(base["dcp"], tmp_path / "cut")
    f, off, length = _dcp_item(cut, "model.3.weight")
    fx.truncate(f, off + length // 2)
    r = probe1(cut)
    assert r.verdict is Verdict.TRUNCATED and "DC004" in codes(r)
    assert "model.3.weight" in r.damaged_tensors
    assert "model.0.weight" not in r.damaged_tensors + r.missing_tensors

    flip = fx.copy(base["dcp"], tmp_path / "flip")
    f, off, length = _dcp_item(flip, "optimizer.state.1.exp_avg")
    import io
    import struct as st
    import zipfile

    data = f.read_bytes()[off:off + length]
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        info = zf.getinfo(next(n for n in zf.namelist() if n.endswith("data/0")))
    nlen, xlen = st.unpack_from("<HH", data, info.header_offset + 26)
    fx.flip_bit(f, off + info.header_offset + 30 + nlen + xlen + 3, 0)  # the item's payload
    r = probe1(flip, numeric=False)
    assert r.verdict is Verdict.DAMAGED and "DC007" in codes(r)
    dc7 = next(x for x in r.findings if x.code == "DC007")
    assert dc7.tensors == ("optimizer.state.1.exp_avg",)

    orphan = fx.copy(base["dcp"], tmp_path / "orphan")
    (orphan / "__1_0.distcp").write_bytes(b"PK")
    assert "DC006" in codes(probe1(orphan))


def test_run_directory_walk_groups_companions(base, tmp_path):
    from ckptrescue.checkpoints.probes.checkpoints import probe_paths

    run = tmp_path / "run"
    run.mkdir()
    fx.copy(base["zip"], run / "last.pt")
    fx.copy(base["dcp"], run / "step_2")
    fx.copy(base["hf"], run / "hf-export")
    (run / "hf-export" / "config.json").write_text("{}")
    (run / "train.log").write_text("loss 0.1\n")
    (run / "broken.ckpt").write_bytes(b"\0" * 100)
    reports = probe_paths([run])
    got = {(str(__import__("pathlib").Path(r.path).relative_to(run)), r.format, str(r.verdict))
           for r in reports}
    assert got == {("last.pt", "torch-zip", "intact"), ("step_2", "dcp", "intact"),
                   ("hf-export/model.safetensors.index.json", "hf-sharded", "intact"),
                   ("broken.ckpt", "unknown", "unreadable")}
    hf = next(r for r in reports if r.format == "hf-sharded")
    assert len(hf.files) == 4  # the index and its three shards, probed once as one checkpoint


def test_salvage_dcp_and_hf(base, tmp_path):
    import torch
    from safetensors.torch import load_file

    from ckptrescue.checkpoints.salvage import salvage

    res = salvage(base["dcp"], tmp_path / "out-dcp")
    got = load_file(str(tmp_path / "out-dcp" / "dcp.salvaged.safetensors"))
    assert res.lost == [] and set(got) == set(res.recovered)
    for name, t in got.items():
        assert torch.equal(t, base["flat"][name])
    gone = fx.copy(base["hf"], tmp_path / "hf")
    os.remove(gone / "model-00003-of-00003.safetensors")
    res = salvage(gone / "model.safetensors.index.json", tmp_path / "out-hf")
    index = json.loads((gone / "model.safetensors.index.json").read_text())
    assert {x["name"] for x in res.lost} == {
        k for k, v in index["weight_map"].items() if v == "model-00003-of-00003.safetensors"}
    assert set(res.recovered) == set(index["weight_map"]) - {x["name"] for x in res.lost}
    assert "shard model-00003-of-00003.safetensors missing" in res.lost[0]["reason"]


def test_dcp_chunks_must_tile(base, tmp_path):
    import dataclasses
    import pickle

    import torch
    from torch.distributed.checkpoint import FileSystemReader

    d = fx.copy(base["dcp"], tmp_path / "tile")
    md = FileSystemReader(str(d)).read_metadata()
    meta = md.state_dict_metadata["model.0.weight"]
    half = dataclasses.replace(meta.chunks[0], sizes=torch.Size([meta.size[0] // 2,
                                                                 meta.size[1]]))
    meta.chunks[0] = half
    with open(d / ".metadata", "wb") as fh:
        pickle.dump(md, fh)
    r = probe1(d)
    dc5 = [f for f in r.findings if f.code == "DC005"]
    assert dc5 and dc5[0].tensors == ("model.0.weight",) and "cover" in dc5[0].title
    assert r.verdict is not Verdict.INTACT
    assert "model.0.weight" in r.damaged_tensors


def test_safetensors_fuzzed_headers_never_crash(tmp_path_factory):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    entry = st.fixed_dictionaries({
        "dtype": st.sampled_from(["F32", "F16", "BF16", "I64", "U8", "F4", "XX", 3]),
        "shape": st.lists(st.integers(-2, 9), max_size=3),
        "data_offsets": st.lists(st.integers(-8, 200), min_size=2, max_size=2)})

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.dictionaries(st.text(max_size=5), entry, max_size=4), st.integers(0, 300))
    def run(header, tail):
        text = json.dumps(header).encode()
        path = tmp_path_factory.mktemp("st") / "f.safetensors"
        path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(range(256))[:tail % 256])
        r = probe1(path)
        assert r.format == "safetensors"
        assert r.verdict in set(Verdict)

    run()
