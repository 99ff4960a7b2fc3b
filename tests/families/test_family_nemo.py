"""NeMo ``.nemo`` archives (``families/nemo.py``) on archives built from NeMo's documented layout
(``fixtures/families/nemo.py``: nemo_toolkit is not installed; weights by ``torch.save``). The
oracle is ``tarfile`` + ``torch.load(weights_only=True)`` of each extracted weights member (in
memory): intact only where it loads, every tensor's bytes found at the absolute offset the probe
names. Each failure is a mutation of a built archive, asserted by code and rank."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest
from f1_build import codes

from ckptrescue.checkpoints.base import Verdict
from ckptrescue.checkpoints.probes.checkpoints import probe_paths
from fixtures.families import nemo as writer

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return writer.build(tmp_path_factory.mktemp("nemo"))


def one(path: Path):  # noqa: ANN201
    reports = probe_paths([path])
    assert len(reports) == 1
    return reports[0]


def oracle(path: Path) -> dict[str, object]:
    """member name -> its state dict (torch.load weights_only of the extracted bytes) or the
    exception class name."""
    out: dict[str, object] = {}
    with tarfile.open(path, "r:*") as tar:
        for info in tar.getmembers():
            if info.isfile() and info.name.endswith("model_weights.ckpt"):
                data = tar.extractfile(info).read()  # type: ignore[union-attr]
                try:
                    out[info.name.removeprefix("./")] = torch.load(
                        io.BytesIO(data), weights_only=True, map_location="cpu")
                except Exception as exc:  # noqa: BLE001 - the outcome is the oracle's answer
                    out[info.name.removeprefix("./")] = type(exc).__name__
    return out


def raw(t):  # noqa: ANN001, ANN201
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


@pytest.mark.parametrize("name", ["single", "tp2", "tp2pp2"])
def test_intact_where_torch_loads_every_weights_member(built: dict[str, Path], name: str) -> None:
    path = built[name]
    loaded = oracle(path)
    assert loaded and all(isinstance(v, dict) for v in loaded.values()), loaded
    r = one(path)
    assert r.format == "nemo" and r.verdict is Verdict.INTACT, [f.title for f in r.findings]
    fam = r.extra["family"]
    assert fam["bad_ranks"] == []
    expected_ranks = {"single": ["model"], "tp2": ["mp_rank_00", "mp_rank_01"],
                      "tp2pp2": [f"tp_rank_{t:02d}_pp_rank_{p:03d}" for t in (0, 1)
                                 for p in (0, 1)]}[name]
    assert sorted(fam["ranks"]) == expected_ranks
    # every tensor the oracle loaded is named, and its bytes sit at the named absolute offset
    blob = path.read_bytes()
    by_name = {t.name: t for t in r.tensors}
    count = 0
    for member, sd in loaded.items():
        rank = member.split("/")[0] if "/" in member else None
        for key, tensor in sd.items():  # type: ignore[attr-defined]
            rec = by_name[f"{rank}/{key}" if rank else key]
            assert rec.file == str(path) and rec.status == "ok"
            assert list(rec.shape) == list(tensor.shape)
            data = raw(tensor)
            assert blob[rec.offset:rec.offset + len(data)] == data, rec.name
            count += 1
    assert count == len(r.tensors)


def test_bit_flip_names_tensor_with_absolute_offset(built: dict[str, Path],
                                                    tmp_path: Path) -> None:
    path = shutil.copy(built["tp2"], tmp_path / "tp2.nemo")
    r0 = one(Path(path))
    victim = next(t for t in r0.tensors
                  if t.name == "mp_rank_01/model.decoder.layers.1.mlp.linear_fc1.weight")
    data = bytearray(Path(path).read_bytes())
    data[victim.offset + 5] ^= 0x10
    Path(path).write_bytes(bytes(data))
    r = one(Path(path))
    assert r.verdict is Verdict.DAMAGED
    assert r.damaged_tensors == [victim.name]
    tz = next(f for f in r.findings if f.code == "TZ002")
    assert victim.name in tz.tensors and tz.offset is not None
    assert tz.offset <= victim.offset + 5 < tz.offset + (tz.length or 0)
    assert codes(r)["FM007"] == [["mp_rank_01"]]
    assert r.extra["family"]["bad_ranks"] == ["mp_rank_01"]
    assert isinstance(oracle(Path(path))["mp_rank_00/model_weights.ckpt"], dict)


def _rebuild_without(src: Path, dst: Path, drop: str) -> Path:
    """The same archive with the members under ``drop`` left out (a partial copy/upload)."""
    with tarfile.open(src) as tin, tarfile.open(dst, "w:") as tout:
        for info in tin.getmembers():
            if info.name.removeprefix("./").startswith(drop):
                continue
            tout.addfile(info, tin.extractfile(info) if info.isfile() else None)
    return dst


def test_missing_model_parallel_rank(built: dict[str, Path], tmp_path: Path) -> None:
    path = _rebuild_without(built["tp2pp2"], tmp_path / "x.nemo", "tp_rank_01_pp_rank_001")
    r = one(path)
    assert r.verdict is Verdict.INCOMPLETE
    assert codes(r)["FM001"] == [["tp_rank_01_pp_rank_001"]]
    assert r.extra["family"]["ranks"]["tp_rank_01_pp_rank_001"] == "missing"
    assert "tp_rank_01_pp_rank_001/model_weights.ckpt" not in oracle(path)


def test_missing_config_and_weights(built: dict[str, Path], tmp_path: Path) -> None:
    r = one(_rebuild_without(built["single"], tmp_path / "a.nemo", "model_config.yaml"))
    assert r.verdict is Verdict.INCOMPLETE and "FM043" in codes(r)
    r2 = one(_rebuild_without(built["single"], tmp_path / "b.nemo", "model_weights.ckpt"))
    assert r2.verdict is Verdict.INCOMPLETE and "FM043" in codes(r2)
    assert oracle(tmp_path / "b.nemo") == {}


def test_truncated_archive(built: dict[str, Path], tmp_path: Path) -> None:
    path = Path(shutil.copy(built["single"], tmp_path / "cut.nemo"))
    r0 = one(path)
    last = max(r0.tensors, key=lambda t: t.offset or 0)
    with open(path, "r+b") as fh:
        fh.truncate((last.offset or 0) + 4)
    r = one(path)
    assert r.verdict is Verdict.TRUNCATED
    assert "FM044" in codes(r) and codes(r)["FM007"] == [["model"]]
    assert last.name in r.damaged_tensors + r.missing_tensors + [
        t.name for t in r.tensors if t.status == "truncated"]
    with pytest.raises(tarfile.TarError):
        oracle(path)


def test_damaged_member_header(built: dict[str, Path], tmp_path: Path) -> None:
    path = Path(shutil.copy(built["single"], tmp_path / "hdr.nemo"))
    weights = next(m for m in one(path).extra["nemo"]["members"]
                   if m["name"] == "model_weights.ckpt")
    data = bytearray(path.read_bytes())
    data[weights["offset"] - 512 + 130] ^= 0x01  # a digit of the member's size field
    path.write_bytes(bytes(data))
    r = one(path)
    assert "FM044" in codes(r) and r.verdict in (Verdict.DAMAGED, Verdict.INCOMPLETE)
    # tarfile stops silently at a bad header after the first: the weights are simply gone
    assert "model_weights.ckpt" not in oracle(path)


def test_gzip_archive_and_its_damage(built: dict[str, Path], tmp_path: Path) -> None:
    r = one(built["legacy_gz"])
    assert r.verdict is Verdict.INTACT and "FM046" in codes(r)
    assert isinstance(oracle(built["legacy_gz"])["model_weights.ckpt"], dict)
    path = Path(shutil.copy(built["legacy_gz"], tmp_path / "gz.nemo"))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    bad = one(path)
    assert bad.verdict is Verdict.DAMAGED and "FM044" in codes(bad)


def test_sharded_weights(built: dict[str, Path], tmp_path: Path) -> None:
    r = one(built["sharded"])
    assert r.verdict is Verdict.INTACT and "FM047" in codes(r)
    with tarfile.open(built["sharded"]) as tar:
        meta = json.loads(tar.extractfile("./model_weights/metadata.json").read())  # type: ignore[union-attr]
    assert meta["sharded_backend"] == "torch_dist"
    r2 = one(_rebuild_without(built["sharded"], tmp_path / "s.nemo", "model_weights/.metadata"))
    assert r2.verdict is Verdict.INCOMPLETE and codes(r2)["FM043"] == [["model_weights"]]


def test_salvage_of_a_damaged_nemo_is_bit_exact(built: dict[str, Path], tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from ckptrescue.checkpoints.salvage import salvage

    ev = tmp_path / "ev"
    ev.mkdir()
    path = Path(shutil.copy(built["single"], ev / "model.nemo"))
    r0 = one(path)
    victim = next(t for t in r0.tensors if t.name.endswith("linear_fc2.weight"))
    data = bytearray(path.read_bytes())
    data[victim.offset + 3] ^= 0x01
    path.write_bytes(bytes(data))
    res = salvage(path, tmp_path / "out")
    assert [x["name"] for x in res.lost] == [victim.name]
    got = load_file(str(tmp_path / "out" / "model.salvaged.nemo.safetensors")) \
        if (tmp_path / "out" / "model.salvaged.nemo.safetensors").exists() else load_file(
        res.output)
    full = writer.shard(1, 1, 0, 0)
    assert set(got) == set(full) - {victim.name}
    for name, t in got.items():
        assert raw(t) == raw(full[name]), name
