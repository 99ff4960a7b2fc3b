"""Salvage of a multi-rank family step, per rank, and ``fill_from`` an earlier complete step (same
rank, same name/shape/dtype), on DeepSpeed steps DeepSpeed's own engine wrote
(``fixtures/families/deepspeed.py``). Every written tensor is compared bit for bit with what
``torch.load`` gives for the source (or fill) rank file; the failures are mutations of a real
step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from f1_build import built, copy

from ckptrescue.checkpoints.salvage import salvage
from ckptrescue.errors import UsageError

torch = pytest.importorskip("torch")
pytest.importorskip("deepspeed")

OPT1 = "zero_pp_rank_1_mp_rank_00_optim_states.pt"
OPT0 = "zero_pp_rank_0_mp_rank_00_optim_states.pt"
MODEL = "mp_rank_00_model_states.pt"
FLAT = "optimizer_state_dict.single_partition_of_fp32_groups.0"


@pytest.fixture(scope="module")
def ds() -> Path:
    return built("deepspeed")


def flat(obj, prefix: str = "") -> dict:  # noqa: ANN001
    out = {}
    if isinstance(obj, torch.Tensor):
        out[prefix.rstrip(".")] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flat(v, f"{prefix}{k}."))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out.update(flat(v, f"{prefix}{i}."))
    return out


def tensors_of(path: Path) -> dict:
    """The oracle: torch.load of a DeepSpeed rank file (its own classes: weights_only=False,
    on fixtures the test itself trusts)."""
    return flat(torch.load(path, weights_only=False, map_location="cpu"))


def raw(t) -> bytes:  # noqa: ANN001
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def load_st(path: str) -> dict:
    from safetensors.torch import load_file

    return load_file(path)


def damaged_step(ds: Path, tmp_path: Path) -> tuple[Path, int]:
    """global_step3 of the ZeRO-2 run: rank 1's optimizer file missing, one byte of rank 0's
    flat fp32 partition flipped."""
    step = copy(ds / "zero2" / "global_step3", tmp_path / "run" / "global_step3")
    (step / OPT1).unlink()
    from ckptrescue.checkpoints.probes.checkpoints import probe_paths

    rec = next(t for t in probe_paths([step])[0].tensors
               if t.name == f"zero_pp_rank_0_mp_rank_00/{FLAT}")
    data = bytearray((step / OPT0).read_bytes())
    data[rec.offset + 2] ^= 0x04
    (step / OPT0).write_bytes(bytes(data))
    return step, rec.offset


def test_salvage_step_per_rank_without_fill(ds: Path, tmp_path: Path) -> None:
    step, _ = damaged_step(ds, tmp_path)
    res = salvage(step, tmp_path / "out")
    data = json.loads((tmp_path / "out" / "salvage.json").read_text())
    assert data["family"] == "deepspeed" and data["step"] == 3
    ranks = data["ranks"]
    assert ranks["zero_pp_rank_1_mp_rank_00"]["status"] == "lost"
    assert "missing" in ranks["zero_pp_rank_1_mp_rank_00"]["files"][0]["reason"]
    r0 = ranks["zero_pp_rank_0_mp_rank_00"]["files"][0]
    assert [x["name"] for x in r0["lost"]] == [FLAT] and r0["status"] == "partial"
    assert ranks["mp_rank_00"]["status"] == "recovered"
    assert res.unaccounted and not res.clean
    assert [x["name"] for x in res.lost] == [f"zero_pp_rank_0_mp_rank_00/{FLAT}"]
    # every written tensor is bit-exact with the source rank file
    for label, src in (("mp_rank_00", MODEL), ("zero_pp_rank_0_mp_rank_00", OPT0)):
        entry = ranks[label]["files"][0]
        got = load_st(entry["output"])
        want = tensors_of(ds / "zero2" / "global_step3" / src)
        assert set(got) == set(entry["recovered"]) == set(want) - {x["name"]
                                                                   for x in entry["lost"]}
        for name, t in got.items():
            assert raw(t) == raw(want[name]) and t.dtype == want[name].dtype, name
    assert Path(ranks["mp_rank_00"]["files"][0]["output"]).parent.name == "mp_rank_00"


def test_fill_from_earlier_complete_step(ds: Path, tmp_path: Path) -> None:
    step, _ = damaged_step(ds, tmp_path)
    prev = copy(ds / "zero2" / "global_step2", tmp_path / "run" / "global_step2")
    res = salvage(step, tmp_path / "out", fill_from=prev)
    assert res.lost == [] and res.unaccounted is None
    assert res.mixed and not res.clean  # filled from another step: mixed, never clean (#28)
    data = json.loads((tmp_path / "out" / "salvage.json").read_text())
    assert data["fill_step"] == 2
    r1 = data["ranks"]["zero_pp_rank_1_mp_rank_00"]["files"][0]
    want1 = tensors_of(prev / OPT1)
    assert r1["status"] == "filled" and {f["tensor"] for f in r1["filled"]} == set(want1)
    assert {(f["rank"], Path(f["file"]).name, f["step"]) for f in r1["filled"]} == {
        ("zero_pp_rank_1_mp_rank_00", OPT1, 2)}
    got1 = load_st(r1["output"])
    for name, t in got1.items():
        assert raw(t) == raw(want1[name]), name
    r0 = data["ranks"]["zero_pp_rank_0_mp_rank_00"]["files"][0]
    assert [(f["tensor"], f["rank"], f["step"]) for f in r0["filled"]] == [
        (FLAT, "zero_pp_rank_0_mp_rank_00", 2)]
    got0 = load_st(r0["output"])
    assert raw(got0[FLAT]) == raw(tensors_of(prev / OPT0)[FLAT])
    assert f"zero_pp_rank_0_mp_rank_00/{FLAT}" in res.filled
    assert len([n for n in res.filled if n.startswith("zero_pp_rank_1")]) == len(want1)


def test_fill_from_refusals(ds: Path, tmp_path: Path) -> None:
    step, _ = damaged_step(ds, tmp_path)
    bad_prev = copy(ds / "zero2" / "global_step2", tmp_path / "run" / "global_step2")
    (bad_prev / OPT0).unlink()
    with pytest.raises(UsageError, match="COMPLETE"):
        salvage(step, tmp_path / "o1", fill_from=bad_prev)
    later = copy(ds / "zero2" / "global_step3", tmp_path / "other" / "global_step3")
    with pytest.raises(UsageError, match="earlier"):
        salvage(step, tmp_path / "o2", fill_from=later)
    torch.save({"w": torch.zeros(2)}, tmp_path / "plain.pt")
    with pytest.raises(UsageError, match="same family"):
        salvage(step, tmp_path / "o3", fill_from=tmp_path / "plain.pt")


def test_fill_needs_same_name_shape_and_dtype(tmp_path: Path) -> None:
    """Synthetic DeepSpeed-layout steps (``fixtures/families/deepspeed_synth.py``): the fill step
    is complete but its partitions have another size (another run's layout): the damaged
    partitions are not filled (named, with the reason); the rest of the ranks recover."""
    from ckptrescue.checkpoints.probes.checkpoints import probe_paths
    from fixtures.families.deepspeed_synth import make_step

    step = make_step(tmp_path / "run", 4, 2)
    prev = make_step(tmp_path / "other", 4, 1, numel=12)
    assert probe_paths([prev])[0].verdict.value == "intact"
    recs = {t.name: t for t in probe_paths([step])[0].tensors}
    for r in (0, 1):
        rec = recs[f"zero_pp_rank_{r}_mp_rank_00/{FLAT}"]
        f = step / f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt"
        data = bytearray(f.read_bytes())
        data[rec.offset + 1] ^= 0x01
        f.write_bytes(bytes(data))
    res = salvage(step, tmp_path / "out", fill_from=prev)
    assert res.filled == []
    lost = {x["name"]: x["reason"] for x in res.lost}
    assert sorted(lost) == [f"zero_pp_rank_{r}_mp_rank_00/{FLAT}" for r in (0, 1)]
    assert all("differs in shape/dtype" in why for why in lost.values())
    data = json.loads((tmp_path / "out" / "salvage.json").read_text())
    assert data["ranks"]["zero_pp_rank_1_mp_rank_00"]["status"] == "partial"
    assert data["ranks"]["zero_pp_rank_2_mp_rank_00"]["status"] == "recovered"
