"""Lightning family on checkpoints a real ``lightning.Trainer`` wrote on CPU
(``fixtures/families/lightning.py``); Lightning's own resume is the oracle for intact."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest
from f2_build import built, copy, oracle

from ckptrescue.checkpoints.base import ProbeOptions, Verdict
from ckptrescue.checkpoints.families.lightning import LightningFamily


def codes(report) -> dict[str, list[list[str]]]:  # noqa: ANN001
    out: dict[str, list[list[str]]] = {}
    for f in report.findings:
        out.setdefault(f.code, []).append(list(f.details.get("ranks", [])))
    return out


@pytest.fixture(scope="module")
def fx() -> Path:
    return built("lightning")


def probe(path: Path):  # noqa: ANN201
    return LightningFamily.probe(path, ProbeOptions())


def test_intact_ckpt_and_sentinel_is_not_damage(fx: Path) -> None:
    ckpt = fx / "run" / "step=4.ckpt"
    assert LightningFamily.detect(ckpt)
    report = probe(ckpt)
    assert report.format == "lightning"
    assert report.verdict is Verdict.INTACT, report.findings
    assert "FM062" in codes(report) and "NM001" not in codes(report)
    fam = report.extra["family"]
    assert fam["ranks"] == {"rank0": "intact"} and fam["steps_recorded"] == [4]
    res = oracle(
        "import sys, warnings; warnings.simplefilter('ignore');"
        "import lightning.pytorch as pl; from fixtures.families.lightning import module_class;"
        "t = pl.Trainer(accelerator='cpu', max_steps=5, logger=False, enable_checkpointing=False,"
        " enable_progress_bar=False, enable_model_summary=False);"
        "t.fit(module_class()(), ckpt_path=sys.argv[1]); print('resumed', t.global_step)",
        str(ckpt))
    assert res.returncode == 0 and "resumed 5" in res.stdout, res.stderr[-2000:]


def test_fsdp_strategy_directory_intact_and_missing_meta(fx: Path, tmp_path: Path) -> None:
    d = fx / "fsdp" / "step=4.ckpt"
    report = probe(d)
    assert report.verdict is Verdict.INTACT, report.findings
    assert set(report.extra["family"]["ranks"]) == {"meta", "sharded"}
    res = oracle("import sys; from pathlib import Path;"
                 "from lightning.fabric.utilities.load import _load_distributed_checkpoint as l;"
                 "print(l(Path(sys.argv[1]))['global_step'])", str(d))
    assert res.returncode == 0 and res.stdout.strip().endswith("4"), res.stderr[-2000:]
    broken = copy(d, tmp_path / "step=4.ckpt")
    (broken / "meta.pt").unlink()
    report = probe(broken)
    assert report.verdict is Verdict.INCOMPLETE
    assert ["meta"] in codes(report)["FM063"]


def test_ckpt_from_another_step(fx: Path, tmp_path: Path) -> None:
    mixed = copy(fx / "run" / "step=2.ckpt", tmp_path / "step=4.ckpt")
    report = probe(mixed)
    assert report.verdict is Verdict.DAMAGED
    assert codes(report)["FM002"] == [["rank0"]]


def test_torn_ckpt(fx: Path, tmp_path: Path) -> None:
    torn = copy(fx / "run" / "step=3.ckpt", tmp_path / "step=3.ckpt")
    os.truncate(torn, torn.stat().st_size // 2)
    report = probe(torn)
    assert report.verdict not in (Verdict.INTACT, Verdict.SUSPECT)
    assert ["rank0"] in codes(report)["FM007"]


def test_nan_in_sentinel_slot_is_still_suspect(fx: Path, tmp_path: Path) -> None:
    ckpt = copy(fx / "run" / "step=4.ckpt", tmp_path / "step=4.ckpt")
    rec = next(t for t in probe(ckpt).tensors if t.name.endswith(".kth_value"))
    with open(ckpt, "r+b") as fh:
        fh.seek(rec.offset)
        fh.write(struct.pack("<f", float("nan")))
    report = probe(ckpt)
    assert report.verdict is not Verdict.INTACT
    assert "FM062" not in codes(report)


def test_last_ckpt_pointer(fx: Path, tmp_path: Path) -> None:
    run = copy(fx / "run", tmp_path / "run")
    [ptr] = LightningFamily.pointers(run)
    assert ptr.step == 4 and ptr.file.name == "last.ckpt"
    (run / "last.ckpt").unlink()
    (run / "last.ckpt").symlink_to("step=5.ckpt")  # names a step that was never written
    [ptr] = LightningFamily.pointers(run)
    assert ptr.step == 5 and not (run / ptr.value).exists()
    assert LightningFamily.pointer_value(ptr, run / "step=4.ckpt") == "step=4.ckpt"
    assert run / "last.ckpt" not in LightningFamily.claim(run)


# Lightning's own load of an FSDP-strategy directory, once per directory
FSDP_LOAD = """
import io, json, sys, contextlib, warnings
warnings.simplefilter("ignore")
from pathlib import Path
from lightning.fabric.utilities.load import _load_distributed_checkpoint as load
out = {}
for d in sys.argv[1:]:
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            load(Path(d))
        out[d] = "ok"
    except BaseException as exc:
        out[d] = "error: " + str(exc).strip().splitlines()[-1][:200]
print("ORACLE" + json.dumps(out))
"""
# one byte changed where the pickle still parses (found by flipping every byte of the real
# .metadata and loading each mutant with Lightning; see formats/dcp_metadata_rules.py)
METADATA_EDITS = {
    "a state_dict_metadata key": (b"\x8c\x12model.layer.weight", 8),
    "a TensorStorageMetadata field name": (b"properties", 3),
    "a layout name": (b"torch.strided", 0),
    "a planner path element": (b"\x8c\x0clayer.weight", 4),
    "a _StorageInfo field name": (b"length", 2),
}


def test_fsdp_metadata_byte_that_still_parses(fx: Path, tmp_path: Path) -> None:
    src = fx / "fsdp" / "step=4.ckpt"
    original = (src / ".metadata").read_bytes()
    dirs: dict[str, Path] = {}
    for i, (what, (needle, at)) in enumerate(METADATA_EDITS.items()):
        d = copy(src, tmp_path / f"m{i}" / "step=4.ckpt")
        pos = original.index(needle) + at
        data = bytearray(original)
        data[pos] ^= 0x01
        (d / ".metadata").write_bytes(bytes(data))
        dirs[what] = d
    res = oracle(FSDP_LOAD, str(src), *map(str, dirs.values()))
    line = next(x for x in res.stdout.splitlines() if x.startswith("ORACLE"))
    loaded = json.loads(line[len("ORACLE"):])
    assert loaded[str(src)] == "ok"
    for what, d in dirs.items():
        assert loaded[str(d)].startswith("error"), (what, loaded[str(d)])
        report = probe(d)
        assert report.verdict not in (Verdict.INTACT, Verdict.SUSPECT), (what, report.findings)
        found = [f for f in report.findings if f.code in ("DC008", "DC005")]
        assert found, (what, [(f.code, f.title) for f in report.findings])
