"""Verify before load: the launch gate and the verified torch.load."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckptrescue.datasets.gate import gate_checkpoint, gate_dataset
from ckptrescue.datasets.manifest import build_manifest
from fixtures.datasets import flip_byte, tree_digest, write_jsonl


@pytest.fixture()
def dataset(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "data"
    (root / "train").mkdir(parents=True)
    (root / "eval").mkdir()
    for i in range(20):
        write_jsonl(root / "train" / f"part-{i:02d}.jsonl", lines=30)
    write_jsonl(root / "eval" / "part-00.jsonl", lines=30)
    manifest = tmp_path / "data.sha256"
    build_manifest(root, manifest, jobs=1)
    return root, manifest


def test_an_unchanged_dataset_passes_and_the_sample_is_recorded(dataset: tuple[Path, Path]
                                                                ) -> None:
    root, manifest = dataset
    before = tree_digest(root)
    result = gate_dataset(root, manifest, sample_count=5, seed=7)
    assert result.passed and result.checked == 21 and len(result.hashed) == 5
    again = gate_dataset(root, manifest, sample_count=5, seed=7)
    assert again.hashed == result.hashed  # the seed redraws the same sample
    assert tree_digest(root) == before


def test_a_missing_or_resized_file_fails_without_hashing_it(dataset: tuple[Path, Path]) -> None:
    root, manifest = dataset
    (root / "train" / "part-03.jsonl").unlink()
    with open(root / "train" / "part-04.jsonl", "ab") as fh:
        fh.write(b"{}\n")
    result = gate_dataset(root, manifest, sample=0)
    assert not result.passed
    assert {p["path"]: p["problem"].split()[0] for p in result.problems} == {
        "train/part-03.jsonl": "missing", "train/part-04.jsonl": "size"}


def test_bit_rot_is_caught_when_sampled_and_a_slice_is_gated_alone(
        dataset: tuple[Path, Path]) -> None:
    root, manifest = dataset
    flip_byte(root / "eval" / "part-00.jsonl", 100)  # same size, different bytes
    assert gate_dataset(root, manifest, sample=1.0, seed=1).passed is False
    assert gate_dataset(root, manifest, sample=1.0, only=["train"]).passed
    failed = gate_dataset(root, manifest, sample_count=100, only=["eval"])
    assert failed.problems == [{"path": "eval/part-00.jsonl",
                                "problem": "SHA-256 differs from the manifest"}]


def test_a_slice_that_matches_nothing_does_not_pass(dataset: tuple[Path, Path]) -> None:
    root, manifest = dataset
    assert not gate_dataset(root, manifest, only=["nope"]).passed


def test_checkpoint_gate_and_verified_load(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from ckptrescue.checkpoints.verified_load import CheckpointRejected, load_verified
    from fixtures.checkpoints import exact_tensor

    path = tmp_path / "step-1.pt"
    torch.save({"w": exact_tensor(64, 64, seed=3)}, path)
    assert gate_checkpoint(path).passed
    state = load_verified(path)
    assert torch.equal(state["w"], exact_tensor(64, 64, seed=3))
    # damage the tensor bytes: the CRC no longer matches; nothing is handed to torch.load
    data = bytearray(path.read_bytes())
    at = data.find(exact_tensor(64, 64, seed=3).numpy().tobytes()[:64])
    assert at > 0
    data[at + 10] ^= 0x40
    path.write_bytes(bytes(data))
    result = gate_checkpoint(path)
    assert not result.passed and "damaged" in result.reason
    with pytest.raises(CheckpointRejected, match="damaged"):
        load_verified(path)


def test_verified_load_refuses_an_unsafe_pickle(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from ckptrescue.checkpoints.verified_load import CheckpointRejected, load_verified
    from fixtures.malicious import payload, torch_zip

    path = tmp_path / "evil.pt"
    marker = tmp_path / "ran"
    torch_zip(path, payload("os.system", marker=marker))
    with pytest.raises(CheckpointRejected, match="unsafe"):
        load_verified(path, weights_only=False)
    assert not marker.exists()


def test_sample_one_hashes_every_file_and_a_count_has_its_own_option(
        dataset: tuple[Path, Path]) -> None:
    """--sample is a share (1.0 = every file, never "one file"); --sample-count is a number."""
    from ckptrescue.errors import UsageError

    root, manifest = dataset
    assert len(gate_dataset(root, manifest, sample=1.0, seed=2).hashed) == 21
    assert len(gate_dataset(root, manifest, sample_count=3, seed=2).hashed) == 3
    assert len(gate_dataset(root, manifest, sample=0.5, seed=2).hashed) == 10
    with pytest.raises(UsageError, match="--sample-count"):
        gate_dataset(root, manifest, sample=4)
    import json
    import subprocess
    import sys

    cli = subprocess.run([sys.executable, "-m", "ckptrescue", "gate", str(root), "--manifest",
                          str(manifest), "--sample", "1.0", "--json"], capture_output=True,
                         text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert len(json.loads(cli.stdout)["hashed"]) == 21
    bad = subprocess.run([sys.executable, "-m", "ckptrescue", "gate", str(root), "--manifest",
                          str(manifest), "--sample", "5"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "--sample-count" in bad.stderr


def test_files_the_manifest_does_not_list_fail_closed(dataset: tuple[Path, Path]) -> None:
    """A file the manifest does not list would be loaded unchecked: unverified, the gate fails
    and says how many, unless --allow-unverified; --only narrows it to the slice gated."""
    root, manifest = dataset
    write_jsonl(root / "train" / "part-99.jsonl", lines=3)  # added after the manifest
    result = gate_dataset(root, manifest, sample=0)
    assert not result.passed and result.problems == []
    assert result.unverified_count == 1 and result.unverified == ["train/part-99.jsonl"]
    assert result.reason.startswith("1 file(s) not in the manifest (unverified")
    allowed = gate_dataset(root, manifest, sample=0, allow_unverified=True)
    assert allowed.passed and "1 file(s) not in the manifest" in allowed.reason
    assert gate_dataset(root, manifest, sample=0, only=["eval"]).passed
    inside = root / "eval" / "data.sha256"  # a manifest kept inside the tree is not data
    inside.write_bytes(manifest.read_bytes())
    assert gate_dataset(root, inside, sample=0, only=["eval"]).passed
