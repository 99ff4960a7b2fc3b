"""torch.save zip archives: CRC per record, truncation walk, deleted records, tensor map.

Fixtures: real ``torch.save`` of a small MLP (Linear/BatchNorm/Linear) with Adam state after two
steps, nested as {"model", "optimizer", "scheduler", "step"} (fixtures/checkpoints.py); each test
damages a copy. Expected tensor names come from torch itself (load both and compare), not from
ckptrescue.
"""

from __future__ import annotations

import zipfile

import pytest

from ckptrescue.checkpoints.base import Verdict
from fixtures import checkpoints as fx

from .conftest import probe1, torch_changed, tree_hash


def codes(report):
    return [f.code for f in report.findings]


def test_intact_nested_names_and_locations(base):
    before = tree_hash(base["zip"])
    r = probe1(base["zip"])
    assert r.format == "torch-zip"
    assert r.verdict is Verdict.INTACT
    names = {t.name for t in r.tensors}
    assert names == set(base["flat"])
    assert "optimizer.state.0.exp_avg_sq" in names and "model.1.running_var" in names
    # every tensor's bytes are where zipfile says its record's data is
    member = fx.zip_member(base["zip"], "data/0")
    off, size = fx.zip_data_offset(base["zip"], member)
    t0 = next(t for t in r.tensors if t.storage == "0")
    assert (t0.file, t0.offset, t0.length) == (str(base["zip"]), off, size)
    for t in r.tensors:
        assert t.file and t.offset is not None and t.length is not None
        assert t.status == "ok" and t.checksum.startswith("crc32:")
    assert tree_hash(base["zip"]) == before


@pytest.mark.parametrize(("key", "byte", "bit"), [("0", 5, 3), ("3", 1, 0), ("10", 7, 6)])
def test_bit_flip_names_exact_tensors(base, tmp_path, key, byte, bit):
    bad = fx.copy(base["zip"], tmp_path / "flip.pt")
    off, _ = fx.zip_data_offset(bad, fx.zip_member(bad, f"data/{key}"))
    fx.flip_bit(bad, off + byte, bit)
    r = probe1(bad, numeric=False)
    assert r.verdict is Verdict.DAMAGED
    assert set(r.damaged_tensors) == torch_changed(base["zip"], bad)
    assert "TZ002" in codes(r)
    f = next(f for f in r.findings if f.code == "TZ002")
    assert f.offset == off and set(f.tensors) == set(r.damaged_tensors)


def test_views_share_a_storage(tmp_path):
    import torch

    w = torch.arange(20.0).reshape(4, 5)
    path = fx.save_zip(tmp_path / "views.pt", {"w": w, "col": w[:, 1], "row": w[2]})
    off, _ = fx.zip_data_offset(path, fx.zip_member(path, "data/0"))
    fx.flip_bit(path, off + 4 * 6, 2)  # element 6 = w[1,1]: in w and col, not in row
    r = probe1(path, numeric=False)
    # a bad storage implicates every view of it (torch would load all three from it)
    assert set(r.damaged_tensors) == {"w", "col", "row"}
    col = next(t for t in r.tensors if t.name == "col")
    assert col.offset == off + 4 and col.length == 4 * (1 + 3 * 5)


@pytest.mark.parametrize("where", ["in-pickle", "in-record", "after-record", "one-byte-short"])
def test_truncation_walks_local_headers(base, tmp_path, where):
    src = base["zip"]
    bad = fx.copy(src, tmp_path / "cut.pt")
    off5, size5 = fx.zip_data_offset(src, fx.zip_member(src, "data/5"))
    cut = {"in-pickle": 200, "in-record": off5 + size5 // 2,
           "after-record": off5 + size5 + 16, "one-byte-short": src.stat().st_size - 1}[where]
    fx.truncate(bad, cut)
    r = probe1(bad, numeric=False)
    assert r.format == "torch-zip"
    assert r.verdict is Verdict.TRUNCATED
    assert "TZ001" in codes(r)
    if where == "in-pickle":
        assert r.tensors == [] and "TZ009" in codes(r)
        return
    with zipfile.ZipFile(src) as zf:
        order = [n.rsplit("/", 1)[-1] for n in zf.namelist() if "/data/" in n]
    by_storage = {}
    for t in r.tensors:
        by_storage.setdefault(t.storage, set()).add(t.status)
    if where == "in-record":
        assert by_storage["5"] == {"truncated"}
        assert all(by_storage[k] == {"ok"} for k in order[: order.index("5")])
        assert all(by_storage[k] == {"missing"} for k in order[order.index("5") + 1:])
    elif where == "after-record":
        assert all(by_storage[k] == {"ok"} for k in order[: order.index("5") + 1])
        assert all(by_storage[k] == {"missing"} for k in order[order.index("5") + 1:])
    else:  # every record verified; only the central directory is lost
        assert all(s == {"ok"} for s in by_storage.values())


def test_deleted_record_is_incomplete(base, tmp_path):
    bad = tmp_path / "deleted.pt"
    fx.delete_zip_record(base["zip"], bad, "data/4")
    r = probe1(bad)
    assert r.verdict is Verdict.INCOMPLETE
    assert r.missing_tensors == ["model.1.running_mean"]
    assert "TZ005" in codes(r)
    assert "TZ008" in codes(r)  # serialization_id no longer matches the records


def test_damaged_start_still_a_torch_zip(base, tmp_path):
    bad = fx.copy(base["zip"], tmp_path / "head.pt")
    with open(bad, "r+b") as fh:
        fh.write(b"\0\0\0\0")  # torch would call this a legacy file
    r = probe1(bad, numeric=False)
    assert r.format == "torch-zip"
    assert r.verdict is Verdict.DAMAGED
    assert "TZ007" in codes(r)
    assert r.tensors_total == len(base["flat"])  # data offset inferred; names recovered


def test_zeroed_local_header_of_a_record(base, tmp_path):
    bad = fx.copy(base["zip"], tmp_path / "hdr.pt")
    with zipfile.ZipFile(bad) as zf:
        hdr = zf.getinfo(fx.zip_member(bad, "data/2")).header_offset
    with open(bad, "r+b") as fh:
        fh.seek(hdr)
        fh.write(bytes(30))
    r = probe1(bad, numeric=False)
    assert r.verdict is Verdict.DAMAGED
    assert r.damaged_tensors == ["model.1.weight"]
    assert [f.code for f in r.findings if f.tensors] == ["TZ007"]
    # the record's bytes still match their CRC: salvage recovers it bit-exactly
    import torch
    from safetensors.torch import load_file

    from ckptrescue.checkpoints.salvage import salvage

    res = salvage(bad, tmp_path / "out", allow_next_to_input=True)
    assert res.lost == []
    got = load_file(str(tmp_path / "out" / "hdr.salvaged.safetensors"))
    assert torch.equal(got["model.1.weight"], base["flat"]["model.1.weight"])


def test_crc_not_recorded_is_unverifiable_not_damaged(base, tmp_path):
    import torch
    from torch.utils.serialization import config

    path = tmp_path / "nocrc.pt"
    old = config.save.compute_crc32
    config.save.compute_crc32 = False
    try:
        torch.save(base["state"], path)
    finally:
        config.save.compute_crc32 = old
    r = probe1(path)
    assert "TZ003" in codes(r)
    assert "TZ002" not in codes(r)
    assert r.verdict is Verdict.INTACT
    assert {t.status for t in r.tensors} == {"unverified"}


def test_zeroed_page_is_damage_and_torn_write(base, tmp_path):
    src = base["wide"]
    bad = fx.copy(src, tmp_path / "torn.pt")
    off, size = fx.zip_data_offset(src, fx.zip_member(src, "data/0"))  # model.0.weight 16 KiB
    page = fx.zero_page(bad, off + 4096 + 100)
    r = probe1(bad)
    assert r.verdict is Verdict.DAMAGED
    assert r.damaged_tensors == ["model.0.weight"]
    torn = [f for f in r.findings if f.code == "NM003"]
    assert torn and torn[0].offset == page and torn[0].tensors == ("model.0.weight",)


def test_record_size_differs_from_pickle(base, tmp_path):
    bad = tmp_path / "size.pt"
    with zipfile.ZipFile(base["zip"]) as zin, zipfile.ZipFile(bad, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith("data/1"):
                data = data[:-4]  # model.0.bias: one float short, CRC recomputed
            zout.writestr(info, data)
    r = probe1(bad, numeric=False)
    assert r.verdict is Verdict.DAMAGED
    assert r.damaged_tensors == ["model.0.bias"]
    assert "TZ004" in codes(r)


def test_big_endian_archive(tmp_path):
    import torch
    from safetensors.torch import load_file

    from ckptrescue.checkpoints.salvage import salvage
    from fixtures.checkpoints import exact_tensor

    w = exact_tensor(64, 8, seed=1, scale_log2=-15)
    state = {"a": w, "b": torch.arange(10), "c": exact_tensor(5, 3, seed=2).t()}
    le = fx.save_zip(tmp_path / "le.pt", state)
    src = tmp_path / "src"
    src.mkdir()
    be = fx.make_big_endian(le, src / "be.pt", {"0": 4, "1": 8, "2": 4})
    loaded = torch.load(be, weights_only=True)  # torch swaps back: the fixture is right
    assert all(torch.equal(loaded[k], state[k]) for k in state)
    r = probe1(be)
    assert r.verdict is Verdict.INTACT and r.extra["byteorder"] == "big"
    res = salvage(be, tmp_path / "out")
    got = load_file(str(tmp_path / "out" / "be.salvaged.safetensors"))
    assert res.lost == [] and all(torch.equal(got[k], state[k]) for k in state)
    off, _ = fx.zip_data_offset(be, fx.zip_member(be, "data/0"))
    fx.flip_bit(be, off + 4 * 9, 6)  # big-endian: the exponent's high bits are in byte 0
    r = probe1(be)
    nm = next(f for f in r.findings if f.code == "NM002")
    assert nm.details["index"] == 9 and nm.details["flip_bit"] == 30
    assert nm.details["repaired"] == pytest.approx(float(w.reshape(-1)[9]))
