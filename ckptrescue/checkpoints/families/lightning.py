"""PyTorch Lightning checkpoints: ``.ckpt`` files and FSDP-strategy ``.ckpt`` directories.

A Lightning ``.ckpt`` file is one ``torch.save`` zip (``lightning/pytorch/trainer/connectors/
checkpoint_connector.py`` ``dump_checkpoint``) holding ``epoch``, ``global_step``,
``pytorch-lightning_version``, ``state_dict``, ``loops``, ``callbacks``, ``optimizer_states``,
``lr_schedulers`` and the hyper-parameters. It is recognised by the ``pytorch-lightning_version``
key in its pickle (not by the suffix). The FSDP strategy with ``state_dict_type="sharded"``
(``lightning/pytorch/strategies/fsdp.py`` ``save_checkpoint``) writes a ``.ckpt`` DIRECTORY: a
DCP save of ``{"model", "optimizer_0", ...}`` plus ``meta.pt`` (the rest of the checkpoint).
The DeepSpeed strategy's ``.ckpt`` directory (``latest`` + ``checkpoint/mp_rank_00_*``) is a
DeepSpeed step and is left to the DeepSpeed family.

Checks: the keys Lightning's loader needs to resume (FM060), ``global_step`` against the file's
``step=N`` name (FM002) and the fit loop's optimizer-step counter (FM061), the FSDP directory's
two parts (FM063). ``ModelCheckpoint``'s ``kth_value`` / ``best_model_score`` /
``current_score`` are ``tensor(inf)`` sentinels until a monitored value exists: a one-element
tensor holding exactly +/-inf there is not numeric damage (FM062, info). The run's pointer is
``last.ckpt`` (a copy of, or with ``save_last="link"`` a symlink to, the newest checkpoint).
"""

from __future__ import annotations

import math
import os
import re
import struct
from pathlib import Path
from typing import Any, ClassVar

from ckptrescue.checkpoints.base import CheckpointReport, ProbeOptions, Verdict, worst_verdict
from ckptrescue.checkpoints.families import pickles
from ckptrescue.checkpoints.families.base import (
    Family,
    Member,
    MemberSummary,
    Pointer,
    StepLayout,
    finding,
    is_file,
)
from ckptrescue.checkpoints.formats.regular_file import open_regular
from ckptrescue.model import Finding

_MARK = b"pytorch-lightning_version"
_HEAD = 1 << 20
_STEP = re.compile(r"step[=_\-]?(\d+)", re.IGNORECASE)
# keys ``Trainer.fit(ckpt_path=...)`` reads to resume (``_CheckpointConnector.restore_*``)
RESUME_KEYS = ("state_dict", "optimizer_states", "lr_schedulers", "loops", "global_step",
               "epoch")
# ModelCheckpoint state entries that hold tensor(+/-inf) until a monitored value exists
# (``lightning/pytorch/callbacks/model_checkpoint.py``: ``__init_monitor_mode`` sets
# ``kth_value = torch.tensor(inf)`` for mode="min", ``-inf`` for "max")
SENTINELS = ("kth_value", "best_model_score", "current_score")
META = "meta.pt"  # lightning/fabric/utilities/load.py _METADATA_FILENAME


def _is_lightning_zip(path: Path) -> bool:
    try:
        with open_regular(path) as fh:
            head = fh.read(_HEAD)
    except OSError:
        return False
    return head[:2] == b"PK" and _MARK in head


def _is_fsdp_dir(path: Path) -> bool:
    """Lightning's FSDP-strategy directory: ``meta.pt`` (a Lightning zip) and/or a DCP part in a
    directory named ``*.ckpt``."""
    try:
        if not path.is_dir():
            return False
        if is_file(path / META) and _is_lightning_zip(path / META):
            return True
        return path.suffix == ".ckpt" and (is_file(path / ".metadata") or any(
            p.suffix == ".distcp" for p in path.iterdir()))
    except OSError:
        return False


def _get(tree: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(tree, dict):
            return None
        tree = tree.get(k)
    return tree


def _sentinel_value(rec: Any) -> float | None:
    """The value of a one-element float tensor record read from its bytes (None otherwise)."""
    fmt = {"float32": "<f", "float64": "<d", "float16": "<e"}.get(rec.dtype or "")
    if fmt is None or rec.file is None or rec.offset is None or not rec.length:
        return None
    if rec.shape is not None and math.prod(rec.shape) != 1:
        return None
    size = struct.calcsize(fmt)
    try:
        with open_regular(rec.file) as fh:
            fh.seek(rec.offset)
            raw = fh.read(size)
    except OSError:
        return None
    return struct.unpack(fmt, raw)[0] if len(raw) == size else None


class LightningFamily(Family):
    """A Lightning ``.ckpt`` file or FSDP-strategy ``.ckpt`` directory (``lightning``)."""

    name: ClassVar[str] = "lightning"
    step_name: ClassVar[re.Pattern[str]] = _STEP
    priority: ClassVar[int] = 4
    # Lightning registers no safe globals (it loads with torch's default weights_only=True,
    # ``lightning/fabric/utilities/cloud_io.py`` ``_load``); its hyper-parameters are saved as
    # a plain ``dict(obj.hparams)`` (checkpoint_connector.py ``dump_checkpoint``). A user who
    # stores Lightning's own AttributeDict inside hparams pickles this dict subclass (rebuilt by
    # NEWOBJ + SETITEMS, no __setstate__/__reduce__ of its own):
    allowed_globals: ClassVar[frozenset[str]] = frozenset({
        "lightning.fabric.utilities.data.AttributeDict",  # lightning/fabric/utilities/data.py
    })

    @classmethod
    def detect(cls, path: Path) -> bool:
        try:
            if path.is_file():
                return _is_lightning_zip(path)
            return _is_fsdp_dir(path)
        except OSError:
            return False

    @classmethod
    def claim(cls, directory: Path) -> list[Path]:
        if _is_fsdp_dir(directory):
            return [directory]
        out: list[Path] = []
        try:
            entries = sorted(directory.iterdir())
        except OSError:
            return []
        for p in entries:
            if p.name == "last.ckpt" and p.is_symlink():
                continue  # the pointer, not a checkpoint of its own
            if p.suffix == ".ckpt" and cls.detect(p):
                out.append(p)
        return out

    @classmethod
    def layout(cls, root: Path) -> StepLayout:
        if not root.is_dir():
            member = Member(root, "rank0", "model")
            return StepLayout(cls.name, root, cls.step_of(root), [member], [member], {"dp": 1})
        meta = Member(root / META, "meta", "metadata")
        dcp = Member(root, "sharded", "data")
        members = [m for m in (meta,) if is_file(m.path)]
        findings: list[Finding] = []
        if is_file(root / ".metadata") or any(p.suffix == ".distcp" for p in root.iterdir()):
            members.append(dcp)
        if not is_file(meta.path):
            findings.append(finding(
                "FM063", f"{root.name}: {META} missing (epoch, global_step, loops, callbacks "
                "and schedulers live there)", evidence=root, ranks=["meta"]))
        if dcp not in members:
            findings.append(finding(
                "FM063", f"{root.name}: no DCP part (.metadata / *.distcp): the weights are "
                "missing", evidence=root, ranks=["sharded"]))
        return StepLayout(cls.name, root, cls.step_of(root), members, [], {}, findings)

    @classmethod
    def summarize(cls, member: Member, report: CheckpointReport) -> MemberSummary:
        summary = super().summarize(member, report)
        if member.role == "data":
            return summary
        _clear_sentinels(summary)
        root = pickles.data_pkl_root(member.path, report)
        if not isinstance(root, dict):
            summary.scalars["keys"] = None
            return summary
        keys = [k for k in root if isinstance(k, str)]
        top = pickles.top_level(root, ("global_step", "epoch", "loops", "lr_schedulers",
                                       "pytorch-lightning_version"))
        summary.step = pickles.as_int(top.get("global_step"))
        opt = _get(top.get("loops"), "fit_loop",
                   "epoch_loop.automatic_optimization.optim_progress", "optimizer", "step",
                   "total", "completed")
        scheds = top.get("lr_schedulers")
        summary.scalars.update({
            "keys": keys, "global_step": summary.step, "epoch": pickles.as_int(top.get("epoch")),
            "optimizer_steps": pickles.as_int(opt),
            "scheduler_epochs": [pickles.as_int(s.get("last_epoch")) for s in scheds
                                 if isinstance(s, dict)] if isinstance(scheds, list) else [],
            "version": top.get("pytorch-lightning_version"),
        })
        return summary

    @classmethod
    def check(cls, layout: StepLayout, summaries: list[MemberSummary]) -> list[Finding]:
        out = super().check(layout, summaries)
        for s in summaries:
            if s.member.role == "data" or s.scalars.get("keys") is None:
                continue
            keys = set(s.scalars["keys"])
            need = [k for k in RESUME_KEYS if k not in keys
                    and not (s.member.role == "metadata" and k in ("state_dict",
                                                                   "optimizer_states"))]
            if need:
                out.append(finding(
                    "FM060", f"{s.member.path.name} lacks {', '.join(need)}: Trainer.fit("
                    "ckpt_path=...) cannot resume from it", evidence=s.member.path,
                    ranks=[s.member.rank], details={"missing_keys": need}))
            gs, opt = s.scalars.get("global_step"), s.scalars.get("optimizer_steps")
            if gs is not None and opt is not None and opt != gs:
                out.append(finding(
                    "FM061", f"{s.member.path.name}: global_step {gs} but the fit loop "
                    f"counted {opt} optimizer steps", evidence=s.member.path,
                    ranks=[s.member.rank], details={"global_step": gs, "optimizer_steps": opt}))
        return out

    @classmethod
    def pointers(cls, run_dir: Path) -> list[Pointer]:
        last = run_dir / "last.ckpt"
        if last.is_symlink():
            target = os.readlink(last)
            return [Pointer(last, target, cls.step_of(Path(target)), cls.name)]
        if not is_file(last):
            return []
        from ckptrescue.checkpoints.formats.torch_zip import TorchZipFormat

        try:
            report = TorchZipFormat.probe(last, ProbeOptions(numeric=False))
        except (OSError, ValueError):
            return [Pointer(last, "", None, cls.name)]
        step = pickles.as_int(pickles.top_level(pickles.data_pkl_root(last, report),
                                                ("global_step",)).get("global_step"))
        return [Pointer(last, f"global_step={step}" if step is not None else "", step,
                        cls.name)]

    @classmethod
    def pointer_value(cls, pointer: Pointer, root: Path) -> str:
        if pointer.file.is_symlink():
            return root.name
        return f"a copy of {root.name}"


def _clear_sentinels(summary: MemberSummary) -> None:
    """ModelCheckpoint's +/-inf sentinels are not numeric damage (see module docstring)."""
    cleared: list[str] = []
    for rec in summary.records:
        if not rec.name.startswith("callbacks.ModelCheckpoint") or rec.status != "suspect":
            continue
        if rec.name.rsplit(".", 1)[-1] not in SENTINELS:
            continue
        value = _sentinel_value(rec)
        if value is None or not math.isinf(value):
            continue
        rec.status = "ok" if rec.checksum else "unverified"
        rec.reasons = [r for r in rec.reasons if "inf" not in r.lower()
                       and "nan" not in r.lower()]
        cleared.append(rec.name)
    if not cleared:
        return
    summary.findings = [f for f in summary.findings
                        if not (f.code.startswith("NM") and f.tensors
                                and set(f.tensors) <= set(cleared))]
    summary.findings.append(finding(
        "FM062", f"{len(cleared)} ModelCheckpoint sentinel(s) hold inf (no monitored value "
        "yet): " + ", ".join(n.rsplit(".", 1)[-1] for n in cleared),
        evidence=summary.member.path, tensors=cleared))
    if summary.verdict is Verdict.SUSPECT:
        left = [r for r in summary.records if r.status == "suspect"] or [
            f for f in summary.findings if f.code.startswith("NM") and f.code != "NM007"]
        verdicts = [v for v in (Verdict.INTACT,) if not left] or [Verdict.SUSPECT]
        summary.verdict = worst_verdict(verdicts)


FAMILIES = [LightningFamily]
