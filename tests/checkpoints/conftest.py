"""Fixtures for checkpoint tests: real torch/safetensors/DCP saves built once per session by
``fixtures/checkpoints.py``; each test damages its own copy."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from fixtures import checkpoints as fx  # noqa: E402


@pytest.fixture(scope="session")
def base(tmp_path_factory):
    """Pristine saves: zip, legacy, safetensors, wide zip, DCP dir, HF sharded dirs."""
    root = tmp_path_factory.mktemp("ckpt-base")
    state = fx.training_state()
    wide = fx.training_state(1, wide=True)
    out = {
        "state": state,
        "flat": fx.flatten(state),
        "wide_state": wide,
        "zip": fx.save_zip(root / "state.pt", state),
        "legacy": fx.save_legacy(root / "legacy.pt", state),
        "safetensors": fx.save_safetensors(root / "model.safetensors", fx.flatten(state["model"])),
        "wide": fx.save_zip(root / "wide.pt", wide),
        "dcp": fx.save_dcp(root / "dcp", {"model": state["model"],
                                          "optimizer": state["optimizer"], "step": 2}),
        "hf": fx.save_hf_sharded(root / "hf", fx.flatten(state["model"]), 3),
        "hf_bin": fx.save_hf_sharded(root / "hf_bin", fx.flatten(state["model"]), 2, kind="bin"),
    }
    return out


def tree_hash(path: Path) -> str:
    """SHA-256 over every file (names and bytes) under ``path``: evidence before/after."""
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        digest.update(str(f.relative_to(path.parent)).encode())
        digest.update(f.read_bytes())
    return digest.hexdigest()


def probe1(path: Path, **kw):
    """Probe a path that holds exactly one checkpoint."""
    from ckptrescue.checkpoints.probes.checkpoints import probe_paths

    reports = probe_paths([path], **kw)
    assert len(reports) == 1, [r.path for r in reports]
    return reports[0]


def torch_changed(original: Path, damaged: Path) -> set[str]:
    """Oracle independent of ckptrescue: tensor names whose values torch loads differently."""
    import torch

    a = fx.flatten(torch.load(original, weights_only=True))
    b = fx.flatten(torch.load(damaged, weights_only=True))
    def raw(t):
        return t.contiguous().reshape(-1).view(torch.uint8)

    return {n for n in a if n not in b or not torch.equal(raw(a[n]), raw(b[n]))}
