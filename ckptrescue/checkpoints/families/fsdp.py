"""FSDP / torchtitan sharded state dicts: a multi-rank ``torch.distributed.checkpoint`` step.

A DCP directory written by more than one rank (``__<rank>_<n>.distcp`` with a rank above 0),
e.g. torchtitan's ``checkpoint/step-<N>/``. The byte-level checks are the DCP format's
(``formats/dcp.py``: ``.metadata`` present, referenced files, chunk tiling, each item's nested
zip CRCs); this family adds the rank view: a data file of a rank the plan names is missing
(FM050), a rank's items are torn or damaged (FM052, naming the rank), ranks below the plan's
highest that wrote nothing (FM051, info), no ``.metadata`` (FM053: the save never finished), and
the optimizer ``step`` counters each rank's file holds (Adam's per-parameter ``step`` scalars,
spread over the ranks by DCP's dedup) must equal the directory's ``step-N`` and each other
(FM002 names the rank whose file comes from another step). torchtitan writes no pointer file
(it resumes from the highest ``step-N`` whose ``.metadata`` exists). Single-process DCP
directories stay with the ``dcp`` format; Lightning (``meta.pt``) and Megatron
(``metadata.json`` + ``common.pt``) DCP directories with their families. Tensor names are DCP's
FQNs (``fqn@offsets`` for a chunk), each record's ``file`` the rank's ``.distcp``.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import ClassVar

from ckptrescue.checkpoints.base import CheckpointReport, ProbeOptions, Verdict
from ckptrescue.checkpoints.families.base import (
    DirectoryStepFamily,
    StepLayout,
    finding,
    is_file,
    listdir,
    number_in,
)
from ckptrescue.checkpoints.families.pickles import scalar_value
from ckptrescue.model import Finding

_DATA = re.compile(r"^__(\d+)_(\d+)\.distcp$")
_STEP = re.compile(r"(?:step|iter)[-_=]?(\d+)", re.IGNORECASE)


def _ranks(directory: Path) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for n in listdir(directory):
        m = _DATA.match(n)
        if m:
            out.setdefault(int(m.group(1)), []).append(n)
    return out


def _rank_of(path: str | None) -> int | None:
    return number_in(_DATA.match(Path(path).name) if path else None)


def _is_step(d: Path) -> bool:
    if not d.is_dir() or d.is_symlink():
        return False
    if is_file(d / "meta.pt") or (is_file(d / "metadata.json") and is_file(d / "common.pt")):
        return False
    return any(r > 0 for r in _ranks(d))


class FsdpDcpFamily(DirectoryStepFamily):
    """A DCP step written by several ranks (``fsdp-dcp``). No pointer file: torchtitan resumes
    from the highest step-N with a .metadata."""

    name: ClassVar[str] = "fsdp-dcp"
    step_name: ClassVar[re.Pattern[str]] = _STEP
    # DCP's .metadata globals are the dcp format's exact list (formats/pickle_policy.py
    # DCP_ALLOWED_EXACT); the items are weights-only torch zips: nothing beyond.
    allowed_globals: ClassVar[frozenset[str]] = frozenset()

    is_step = staticmethod(_is_step)

    @classmethod
    def layout(cls, root: Path) -> StepLayout:
        ranks = _ranks(root)
        world = max(ranks, default=-1) + 1
        return StepLayout(cls.name, root, cls.step_of(root), [], [], {"ranks": world})

    @classmethod
    def probe(cls, root: Path, options: ProbeOptions) -> CheckpointReport:  # noqa: C901
        from ckptrescue.checkpoints.families.base import verdict_of
        from ckptrescue.checkpoints.formats import tensormap
        from ckptrescue.checkpoints.formats.dcp import DcpFormat

        layout = cls.layout(root)
        report = DcpFormat.probe(root, options)
        report.format = cls.name
        present = _ranks(root)
        world = layout.world["ranks"]
        findings: list[Finding] = []
        if not is_file(root / ".metadata"):
            findings.append(finding(
                "FM053", f"{root.name}: no .metadata, the save never finished; data files "
                f"of ranks {sorted(present)} were written", evidence=root,
                ranks=[f"rank{r}" for r in sorted(present)]))
        bad: dict[str, str] = {}
        for f in report.findings:
            r = _rank_of(f.evidence)
            if r is None:
                continue
            if f.code == "DC003":
                bad[f"rank{r}"] = "missing"
                findings.append(finding("FM050", f"rank {r}: {Path(f.evidence or '').name} "
                                        "named in the save plan is missing",
                                        evidence=f.evidence, ranks=[f"rank{r}"]))
            elif f.code in ("DC004", "DC007") and f"rank{r}" not in bad:
                bad[f"rank{r}"] = "damaged"
                findings.append(finding("FM052", f"rank {r}: {f.title}"[:300],
                                        evidence=f.evidence, ranks=[f"rank{r}"]))
        world = max([world] + [int(k[4:]) + 1 for k in bad])
        idle = [r for r in range(world) if r not in present and f"rank{r}" not in bad]
        if idle:
            findings.append(finding("FM051", f"ranks {idle} wrote no data file", evidence=root,
                                    ranks=[f"rank{r}" for r in idle]))
        steps: dict[int, set[float | int]] = {}
        for rec in report.tensors:
            leaf = rec.name.split("@", 1)[0]
            if not (leaf.startswith("optimizer.state.") and leaf.endswith(".step")):
                continue
            r = _rank_of(rec.file)
            if r is None or rec.offset is None or rec.status not in ("ok", "unverified"):
                continue
            v = scalar_value(Path(rec.file or ""), rec.offset, rec.dtype)
            if v is not None:
                steps.setdefault(r, set()).add(v)
        expected = layout.step
        if expected is None and steps:
            expected = int(Counter(v for vs in steps.values() for v in vs).most_common(1)[0][0])
        for r, vs in sorted(steps.items()):
            other = sorted(v for v in vs if v != expected)
            if other:
                bad[f"rank{r}"] = "damaged"
                findings.append(finding(
                    "FM002", f"rank {r} (__{r}_0.distcp) holds optimizer step "
                    f"{int(other[0])}, the step is {expected}: a rank file from another step",
                    evidence=root / f"__{r}_0.distcp", ranks=[f"rank{r}"],
                    details={"recorded": int(other[0]), "expected": expected}))
        report.findings.extend(findings)
        verdicts = [v for v in (verdict_of(f) for f in findings) if v is not None]
        ranks = {f"rank{r}": bad.get(f"rank{r}", "intact") for r in sorted(present)}
        ranks.update(bad)
        report.extra["family"] = {
            "family": cls.name, "step": layout.step, "world": {"ranks": world}, "ranks": ranks,
            "bad_ranks": sorted(bad), "members": len(present), "expected": world,
            "tensors_elided": 0,
            "steps_recorded": sorted({int(v) for vs in steps.values() for v in vs}),
        }
        prior = report.verdict
        tensormap.finalize(report, [*verdicts, prior])
        if report.verdict is Verdict.INTACT and bad:
            report.verdict = Verdict.DAMAGED
        return report

    @classmethod
    def iter_verified_tensors(cls, path: Path, report: CheckpointReport):  # noqa: ANN206
        from ckptrescue.checkpoints.formats.dcp import DcpFormat

        yield from DcpFormat.iter_verified_tensors(path, report)


FAMILIES = [FsdpDcpFamily]
