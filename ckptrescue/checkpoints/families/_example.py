"""A documented example family: copy this file to add a multi-rank checkpoint family.

Modules in ``ckptrescue/checkpoints/families/`` whose name does not start with ``_`` are imported by
``families.families()``; each may define ``FAMILIES = [Class, ...]``. ``formats/families.py``
registers every family as a checkpoint format, so ``probe``, ``rank`` and ``salvage`` find it
with no further wiring. This module starts with ``_`` so it is NOT registered.

What a family defines (``families/base.py``: ``Family``; all classmethods):

``name`` / ``priority`` (5: before DCP/HF at 10) / ``allowed_globals``
    ``name`` is the ``format`` in probe JSON. ``allowed_globals`` is the EXACT list of qualified
    names the library pickles into its rank files beyond torch's weights-only list, each with a
    comment naming the library file and the ``torch.serialization.add_safe_globals`` call or save
    site it mirrors. Only classes rebuilt without running code (plain ``__dict__``/``__slots__``
    state, dataclasses, ``argparse.Namespace``, enums by value); a test imports the library and
    checks each entry (``tests/families/test_family_safe_globals.py``).
``claim(directory) -> list[Path]``
    The step roots directly in ``directory`` (``[directory]`` when it is itself a step). Judge
    from names AND structure (a ``global_step10/`` that holds DeepSpeed rank files).
``layout(root) -> StepLayout``
    ``members`` present (``Member(path, rank, role)``), ``expected`` members the family's own
    metadata/naming says must exist (absent ones become ``FM001`` naming the ranks), ``world``
    sizes, ``step``, layout-level ``findings`` (``base.finding(code, title, ranks=[...])``).
``summarize(member, report) -> MemberSummary``
    Call ``super().summarize`` and add what the member's OWN metadata records: ``step``, and
    ``scalars`` (optimizer step counters, world sizes, config). Read pickles statically
    (``families/pickles.py``), never unpickle.
``check(layout, summaries) -> list[Finding]``
    Cross-rank rules; call ``super().check`` (step agreement FM002, bad members FM007).
``pointers(run_dir) -> list[Pointer]`` / ``pointer_value(pointer, root) -> str``
    The run's newest-step pointer files and what one must hold to name ``root``; the run-level
    check (``probes/checkpoints.py``) reports a wrong pointer with the exact value to write.
``step_name`` (or ``step_of(root) -> int | None``)
    The pattern whose first group is the step number in a step root's name.

Codes: ``codes/family.py`` (FM001-FM049), ``codes/family_more.py`` (FM050-FM099); a code in
that module's ``VERDICT`` map sets the step verdict when emitted. Fixture writers (the real
library on CPU) go in ``fixtures/families/<library>.py``; tests in ``tests/families/``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar

from ckptrescue.checkpoints.base import CheckpointReport
from ckptrescue.checkpoints.families.base import (
    Family,
    Member,
    MemberSummary,
    Pointer,
    StepLayout,
    number_in,
    read_text,
)

_STEP = re.compile(r"^step_(\d+)$")
_RANK = re.compile(r"^rank(\d+)\.pt$")


class ExampleFamily(Family):
    """``step_N/rank{0..W-1}.pt`` with a ``world_size`` file and a ``latest`` pointer."""

    name: ClassVar[str] = "example-family"
    step_name: ClassVar[re.Pattern[str]] = _STEP
    allowed_globals: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def claim(cls, directory: Path) -> list[Path]:
        if _STEP.match(directory.name) and (directory / "world_size").is_file():
            return [directory]
        return sorted(p for p in directory.iterdir()
                      if _STEP.match(p.name) and (p / "world_size").is_file())

    @classmethod
    def layout(cls, root: Path) -> StepLayout:
        world = int((read_text(root / "world_size") or "0").strip() or 0)
        present = [Member(p, f"rank{_RANK.match(p.name).group(1)}", "model")  # type: ignore[union-attr]
                   for p in sorted(root.iterdir()) if _RANK.match(p.name)]
        expected = [Member(root / f"rank{r}.pt", f"rank{r}", "model") for r in range(world)]
        return StepLayout(cls.name, root, cls.step_of(root), present, expected, {"dp": world})

    @classmethod
    def summarize(cls, member: Member, report: CheckpointReport) -> MemberSummary:
        summary = super().summarize(member, report)
        summary.step = None  # read the member's own step counter here (statically)
        return summary

    @classmethod
    def pointers(cls, run_dir: Path) -> list[Pointer]:
        text = read_text(run_dir / "latest")
        if text is None:
            return []
        return [Pointer(run_dir / "latest", text.strip(), number_in(_STEP.match(text.strip())),
                        cls.name)]


# FAMILIES = [ExampleFamily]   # <- a real family module ends with this line
