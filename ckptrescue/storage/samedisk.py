"""Moved to :mod:`ckptrescue.guard.samedisk` (the guard applies the same rules to every tool);
the storage code keeps importing it from here."""

from __future__ import annotations

from ckptrescue.guard.samedisk import (
    RAM_DISKS,
    RAM_FSTYPES,
    Comparison,
    Sameness,
    UnknownMediaError,
    compare,
    leaf_identity,
    nvme_identity,
    physical_leaves,
)

__all__ = [
    "RAM_DISKS", "RAM_FSTYPES", "Comparison", "Sameness", "UnknownMediaError", "compare",
    "leaf_identity", "nvme_identity", "physical_leaves",
]
