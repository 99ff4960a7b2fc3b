"""Probe in place: checkpoints uploaded to Azurite, fake-gcs-server and moto are probed through
the FUSE view (ranged GETs, no local copy) with the local probe's verdicts and tensors; a full
probe reads each object once (≤ 1.01× its size); the mount never outlives the ``with`` block;
the objects are unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
from stores_testlib import make_kit

from ckptrescue.checkpoints.probes.checkpoints import probe_paths
from ckptrescue.stores import open_view
from ckptrescue.stores.view import open_mounts


def _summary(report):  # noqa: ANN001, ANN202
    return (str(report.verdict), report.tensors_total, sorted(report.damaged_tensors),
            sorted(report.missing_tensors), sorted(f.code for f in report.findings))


def test_probe_in_place_equals_local_probe(fuse_ok, kit, checkpoints):
    names = ("model.pt", "model.safetensors")
    for name in names:
        kit.put(f"runs/a/step-1/{name}", checkpoints[name].read_bytes())
    local = {name: _summary(probe_paths([checkpoints[name]])[0]) for name in names}
    before = kit.state()
    with open_view(kit.url("runs/a/step-1/"), options=kit.options) as view:
        assert view.path.name == "step-1"
        assert sorted(p.name for p in view.path.iterdir()) == sorted(names)
        reports = probe_paths([view.path])
        record = view.settle()
        mountpoint = view.mountpoint
    assert {Path(r.path).name: _summary(r) for r in reports} == local
    assert all(v[0] == "intact" for v in local.values())
    assert record["objects_read"] == 2 and record["objects_listed"] == 2
    for obj in record["objects"]:
        assert obj["bytes_read"] <= 1.01 * obj["size"], obj
        assert obj["requests"] >= 1
    assert record["bytes_read"] <= 1.01 * record["object_bytes"]
    assert sum(record["operations"].values()) >= 3  # one listing + ranged GETs
    assert not mountpoint.exists() and str(mountpoint) not in open_mounts()
    assert kit.state() == before


def test_damaged_tensor_named_in_place(fuse_ok, kit, checkpoints):
    kit.put("ckpt/model.pt", checkpoints["damaged.pt"].read_bytes())
    (local,) = probe_paths([checkpoints["damaged.pt"]])
    assert local.damaged_tensors
    with open_view(kit.url("ckpt/model.pt"), options=kit.options) as view:
        assert view.path.name == "model.pt" and view.path.is_file()
        (remote,) = probe_paths([view.path])
        assert view.url_of(view.path).startswith(kit.url("ckpt/model.pt"))
        record = view.settle()
    assert _summary(remote) == _summary(local)
    assert str(remote.verdict) == "damaged"
    assert record["bytes_read"] <= 1.01 * record["object_bytes"]


def test_a_second_pass_costs_no_request(fuse_ok, kit, checkpoints):
    """The kernel keeps what was read (the version is pinned): reading again sends nothing."""
    data = checkpoints["model.safetensors"].read_bytes()
    kit.put("x/model.safetensors", data)
    with open_view(kit.url("x/model.safetensors"), options=kit.options) as view:
        assert view.path.read_bytes() == data
        first = view.settle()["ranged_gets"]
        assert view.path.read_bytes() == data
        assert view.settle()["ranged_gets"] == first


@pytest.mark.parametrize("scheme", ["gs"])
def test_view_unmounts_on_error_and_refuses_writes(fuse_ok, scheme, request, monkeypatch,
                                                   checkpoints):
    kit = make_kit(scheme, request, monkeypatch)
    kit.put("d/model.pt", checkpoints["model.pt"].read_bytes())
    seen = None
    with pytest.raises(RuntimeError, match="boom"), open_view(kit.url("d/"),
                                                              options=kit.options) as view:
        seen = view.mountpoint
        target = view.path / "model.pt"
        with pytest.raises(OSError), open(target, "r+b"):
            pass
        with pytest.raises(OSError):
            (view.path / "new.bin").write_bytes(b"x")
        with pytest.raises(OSError):
            target.unlink()
        raise RuntimeError("boom")
    assert seen is not None and not seen.exists()
    assert str(seen) not in open_mounts()


def test_read_errors_are_eio_and_name_the_tensor(fuse_ok, request, monkeypatch, checkpoints):
    """A range the store fails to serve reaches the probe as EIO on those bytes: it names the
    tensor behind them (IO001) and verifies the rest, as for a disk with bad sectors."""
    from ckptrescue.errors import RemoteError
    from ckptrescue.stores import StoreOptions, open_store
    from fixtures.storage import zip_member_data_offsets

    kit = make_kit("gs", request, monkeypatch)
    kit.put("e/model.pt", checkpoints["model.pt"].read_bytes())
    members = zip_member_data_offsets(checkpoints["model.pt"])
    member, (off, size) = max(((k, v) for k, v in members.items() if "/data/" in k),
                              key=lambda kv: kv[1][1])
    block = 64 * 1024
    store = open_store(kit.url("e/model.pt"), StoreOptions(block_size=block, readahead=0))
    real = store.read_range
    bad = (off + size // 2) // block

    def flaky(obj, start, length):  # noqa: ANN001, ANN202
        if start // block == bad:
            raise RemoteError("simulated: connection reset")
        return real(obj, start, length)

    store.read_range = flaky  # type: ignore[method-assign]
    with open_view(kit.url("e/model.pt"), store=store) as view:
        (rep,) = probe_paths([view.path])
    assert str(rep.verdict) == "damaged"
    assert len(rep.damaged_tensors) == 1
    assert any(f.code == "IO001" for f in rep.findings)
