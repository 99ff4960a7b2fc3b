"""Regressions found by trying the kit on inputs nobody on the team wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import EXE

torch = pytest.importorskip("torch")


def probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, "probe", *args], capture_output=True, text=True, timeout=300)


def test_empty_tensor_does_not_fake_a_serialization_id_mismatch(tmp_path: Path) -> None:
    torch.save({"empty": torch.zeros(0), "w": torch.ones(3)}, tmp_path / "t.pt")
    res = probe(str(tmp_path / "t.pt"), "--json")
    assert res.returncode == 0, res.stdout
    codes = {f["code"] for c in json.loads(res.stdout)["checkpoints"] for f in c["findings"]}
    assert "TZ008" not in codes


def test_float8_safetensors_load_is_not_an_error(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    save_file({"d": torch.ones(2, dtype=torch.float8_e4m3fn)}, str(tmp_path / "f.safetensors"))
    res = probe(str(tmp_path / "f.safetensors"), "--load", "--json")
    ckpt = json.loads(res.stdout)["checkpoints"][0]
    assert res.returncode == 0 and ckpt["load"]["status"] == "ok", ckpt


def test_a_fifo_is_refused_instead_of_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "model.pt"
    os.mkfifo(fifo)
    res = probe(str(fifo))
    assert res.returncode == 2 and "not a regular file" in res.stderr


def test_an_unreadable_reference_is_an_error_not_ignored(tmp_path: Path) -> None:
    torch.save({"w": torch.ones(3)}, tmp_path / "a.pt")
    (tmp_path / "garbage.pt").write_bytes(b"\x00garbage" * 100)
    res = probe(str(tmp_path / "a.pt"), "--reference", str(tmp_path / "garbage.pt"))
    assert res.returncode == 2 and "reference" in res.stderr


def test_the_same_checkpoint_named_twice_is_probed_once(tmp_path: Path) -> None:
    torch.save({"w": torch.ones(3)}, tmp_path / "a.pt")
    res = probe(str(tmp_path / "a.pt"), str(tmp_path / "a.pt"), "--json")
    assert len(json.loads(res.stdout)["checkpoints"]) == 1


def test_the_payload_is_live_yet_the_kit_never_runs_it(tmp_path: Path) -> None:
    """Positive control: the same os.system payload DOES run when unpickled for real, so the
    kit's "marker never appears" is meaningful."""
    from ckptrescue.drill.trainrun import EvilHook

    control, kit = tmp_path / "control-marker", tmp_path / "kit-marker"
    torch.save({"w": torch.ones(3), "hook": EvilHook(f"touch {control}")}, tmp_path / "c.pt")
    torch.save({"w": torch.ones(3), "hook": EvilHook(f"touch {kit}")}, tmp_path / "k.pt")
    subprocess.run([sys.executable, "-c", "import sys, torch; "
                    "torch.load(sys.argv[1], weights_only=False)", str(tmp_path / "c.pt")],
                   capture_output=True, timeout=120)
    assert control.exists(), "the payload must be live for the test to mean anything"
    res = probe(str(tmp_path / "k.pt"), "--load", "--json")
    assert json.loads(res.stdout)["checkpoints"][0]["verdict"] == "unsafe"
    subprocess.run([EXE, "rank", str(tmp_path)], capture_output=True, timeout=120)
    subprocess.run([EXE, "salvage", str(tmp_path / "k.pt"), str(tmp_path / "out")],
                   capture_output=True, timeout=120)
    assert not kit.exists()
