"""Salvage (bit-exact recovery of every verified tensor, --fill-from, refusals) and rank.

Fixtures: real torch/safetensors saves of the small training state; damage on copies.
Recovered tensors are compared with the original through safetensors/torch loading.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from ckptrescue.errors import RefusedError
from fixtures import checkpoints as fx

from .conftest import tree_hash


def load_st(path):
    from safetensors.torch import load_file

    return load_file(str(path))


def raw(t):
    import torch

    return t.contiguous().reshape(-1).view(torch.uint8)


def test_salvage_bit_flipped_zip_is_bit_exact(base, tmp_path):
    import torch

    from ckptrescue.checkpoints.salvage import salvage

    ev = tmp_path / "evidence"
    ev.mkdir()
    bad = fx.copy(base["zip"], ev / "step_10.pt")
    off, _ = fx.zip_data_offset(bad, fx.zip_member(bad, "data/7"))
    fx.flip_bit(bad, off + 9, 2)
    before = tree_hash(ev)
    res = salvage(bad, tmp_path / "out")
    assert [x["name"] for x in res.lost] == ["model.3.weight"]
    assert "CRC-32 mismatch" in res.lost[0]["reason"]
    got = load_st(tmp_path / "out" / "step_10.salvaged.safetensors")
    flat = base["flat"]
    assert set(got) == set(flat) - {"model.3.weight"} == set(res.recovered)
    for name, t in got.items():
        assert torch.equal(raw(t), raw(flat[name])), name
        assert t.shape == flat[name].shape and t.dtype == flat[name].dtype
    data = json.loads((tmp_path / "out" / "salvage.json").read_text())
    assert data["lost"][0]["name"] == "model.3.weight" and data["filled"] == []
    assert tree_hash(ev) == before


def test_salvage_truncated_with_fill_from(base, tmp_path):
    import torch

    from ckptrescue.checkpoints.salvage import salvage

    ev = tmp_path / "evidence"
    ev.mkdir()
    bad = fx.copy(base["zip"], ev / "cut.pt")
    off, size = fx.zip_data_offset(bad, fx.zip_member(bad, "data/8"))
    fx.truncate(bad, off + size // 2)
    ref = fx.save_zip(tmp_path / "prev.pt", base["state"])
    res = salvage(bad, tmp_path / "out", fill_from=ref)
    assert res.lost == []
    assert "model.3.bias" in res.filled and "model.0.weight" in res.recovered
    assert "optimizer.state.5.exp_avg_sq" in res.filled
    out = tmp_path / "out" / "cut.salvaged.safetensors"
    from safetensors import safe_open

    with safe_open(str(out), "pt") as f:
        meta = f.metadata()
    assert set(json.loads(meta["filled"])) == set(res.filled)
    got = load_st(out)
    for name, t in got.items():
        assert torch.equal(raw(t), raw(base["flat"][name]))


def test_salvage_views_and_legacy(tmp_path):
    import torch

    from ckptrescue.checkpoints.salvage import salvage

    w = torch.arange(20.0).reshape(4, 5)
    src = tmp_path / "in"
    src.mkdir()
    path = fx.save_legacy(src / "views.pt", {"w": w, "col": w[:, 1], "t": w.t()})
    res = salvage(path, tmp_path / "out")
    got = load_st(tmp_path / "out" / "views.salvaged.safetensors")
    assert res.lost == []
    assert torch.equal(got["col"], w[:, 1]) and torch.equal(got["t"], w.t())


def test_salvage_refuses_next_to_input_and_read_only(base, tmp_path):
    from ckptrescue.checkpoints.salvage import salvage

    ev = tmp_path / "evidence"
    ev.mkdir()
    bad = fx.copy(base["zip"], ev / "a.pt")
    with pytest.raises(RefusedError):
        salvage(bad, ev / "recovered")
    res = salvage(bad, ev / "recovered", allow_next_to_input=True)
    assert res.lost == []


@pytest.mark.privileged
def test_salvage_refuses_read_only_mount(base, tmp_path):
    from ckptrescue.checkpoints.salvage import salvage
    from ckptrescue.effects.runner import SubprocessRunner

    mnt = tmp_path / "ro"
    mnt.mkdir()
    runner = SubprocessRunner(None)
    res = runner.run_internal(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mnt)],
                              purpose="test", timeout_s=30)
    assert res.returncode == 0, res.stderr
    try:
        with pytest.raises(RefusedError):
            salvage(base["zip"], mnt / "out")
    finally:
        runner.run_internal(["umount", str(mnt)], purpose="test", timeout_s=30)


def test_rank_run_directory(base, tmp_path):
    from ckptrescue.checkpoints.rank import rank

    run = tmp_path / "run"
    run.mkdir()
    fx.copy(base["zip"], run / "step_100.pt")
    fx.copy(base["zip"], run / "step_200.pt")
    good300 = fx.copy(base["zip"], run / "step_300.pt")
    fx.truncate(good300, good300.stat().st_size - 100)
    flip = run / "step_200.pt"
    off, _ = fx.zip_data_offset(flip, fx.zip_member(flip, "data/1"))
    fx.flip_bit(flip, off, 0)
    shutil.copytree(base["dcp"], run / "step_250")
    os.remove(run / "step_250" / ".metadata")
    (run / "notes.txt").write_text("not a checkpoint")
    res = rank(run)
    assert res.to_json() == {
        "checkpoints": [
            {"path": str(run / "step_300.pt"), "verdict": "truncated"},
            {"path": str(run / "step_250"), "verdict": "incomplete"},
            {"path": str(run / "step_200.pt"), "verdict": "damaged"},
            {"path": str(run / "step_100.pt"), "verdict": "intact"},
        ],
        "resume_from": str(run / "step_100.pt"),
    }


def test_salvage_rebuilds_lost_tensor_map_from_sibling(base, tmp_path):
    """data.pkl bit-flipped (names lost); a sibling of the same run rebuilds the map."""
    import torch

    from ckptrescue.checkpoints.salvage import salvage
    from ckptrescue.errors import UsageError

    ev = tmp_path / "evidence"
    ev.mkdir()
    bad = fx.copy(base["zip"], ev / "step_20.pt")
    off, size = fx.zip_data_offset(bad, fx.zip_member(bad, "data.pkl"))
    with open(bad, "r+b") as fh:  # wreck the pickle's start: nothing can be named
        fh.seek(off)
        fh.write(b"\xff" * 16)
    off3, _ = fx.zip_data_offset(bad, fx.zip_member(bad, "data/3"))
    fx.flip_bit(bad, off3, 0)  # and damage one storage
    with pytest.raises(UsageError, match="names are lost"):
        salvage(bad, tmp_path / "out0")
    sibling = tmp_path / "step_10.pt"
    st = fx.training_state(seed=7)  # same architecture, different values
    fx.save_zip(sibling, st)
    res = salvage(bad, tmp_path / "out", fill_from=sibling)
    assert res.structure_from == str(sibling)
    assert res.filled == ["model.1.bias"]  # its storage failed its CRC: taken from sibling
    got = load_st(tmp_path / "out" / "step_20.salvaged.safetensors")
    flat, other = base["flat"], fx.flatten(st)
    for name, t in got.items():
        want = other[name] if name == "model.1.bias" else flat[name]
        assert torch.equal(raw(t), raw(want)), name


def test_stale_index_tensor_in_another_shard_is_found_not_lost(base, tmp_path):
    """A Hugging Face index whose weight map still names the old shard of a tensor (after a
    re-shard): the tensor is not lost — the probe says the index is stale (HF008), and salvage
    takes the tensor from the shard that really holds it."""
    import torch

    from ckptrescue.checkpoints.probes.checkpoints import probe_paths
    from ckptrescue.checkpoints.salvage import salvage

    ev = fx.copy(base["hf"], tmp_path / "stale")
    index_path = ev / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    shards = sorted(set(index["weight_map"].values()))
    name = next(k for k, v in sorted(index["weight_map"].items()) if v == shards[1])
    index["weight_map"][name] = shards[0]  # the map now points at the wrong shard
    index_path.write_text(json.dumps(index))
    before = tree_hash(ev)
    (rep,) = probe_paths([ev])
    assert "HF008" in [f.code for f in rep.findings]
    assert "HF002" not in [f.code for f in rep.findings]
    assert rep.missing_tensors == [] and rep.verdict == "suspect"
    res = salvage(ev, tmp_path / "out")
    assert res.lost == [] and name in res.recovered
    got = {}
    for f in (tmp_path / "out").glob("*.safetensors"):
        got.update(load_st(f))
    assert torch.equal(raw(got[name]), raw(load_st(ev / shards[1])[name]))
    assert tree_hash(ev) == before


def test_a_fill_from_that_is_not_there_is_said_before_salvaging(base, tmp_path):
    """--fill-from naming nothing passed unnoticed when no tensor needed filling (exit 0, the
    reference never looked at): it is a one-line error before anything is written."""
    from ckptrescue.checkpoints.salvage import salvage
    from ckptrescue.errors import EvidenceError

    ev = tmp_path / "evidence"
    ev.mkdir()
    intact = fx.copy(base["zip"], ev / "step_10.pt")
    with pytest.raises(EvidenceError, match="no such file or directory"):
        salvage(intact, tmp_path / "out", fill_from=tmp_path / "step_9.pt")
    assert not (tmp_path / "out").exists()
