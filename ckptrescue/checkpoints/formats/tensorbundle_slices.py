"""Consistency of sliced variables (``MaxShardSizePolicy``, partitioned variables), pure.

A sliced variable's parent entry lists its slices (its own shard/offset/size/crc are ignored by
TensorFlow); each slice has its own entry keyed ``EncodeTensorNameSlice(name, slice)``. TensorFlow
trusts the slice entries: a slice whose dtype or shape disagrees with its variable makes its C++
reader abort the process (a CHECK failure in ``Tensor::CheckTypeAndIsAligned``, reproduced with
TF 2.21). This module checks what TensorFlow assumes:

* every slice the parent lists has an entry (TB013);
* every slice entry belongs to a variable that lists it, has the variable's dtype, the shape its
  extents imply, and lies inside the variable (TB015; the entry gets ``problem`` set).
"""

from __future__ import annotations

from collections import defaultdict

from ckptrescue.checkpoints.formats.tensorbundle_entries import BundleEntry
from ckptrescue.checkpoints.formats.tensorbundle_index import BundleIndex, index_path
from ckptrescue.model import Finding, Severity


def _slice_problem(parent: BundleEntry, s: BundleEntry, listed: set[str]) -> str | None:
    assert s.slice is not None
    spec = s.slice.text()
    if spec not in listed:
        return f"slice [{spec}] is not one of the variable's slices"
    if s.dtype != parent.dtype:
        return f"slice [{spec}] has dtype {s.dtype_name}, the variable {parent.dtype_name}"
    shape = parent.shape
    if shape is None:
        return None
    if len(s.slice.extents) != len(shape):
        return f"slice [{spec}] has rank {len(s.slice.extents)}, the variable {len(shape)}"
    want = []
    for dim, (start, length) in zip(shape, s.slice.extents, strict=True):
        span = dim - start if length is None else length
        if start < 0 or span < 0 or start + span > dim:
            return f"slice [{spec}] lies outside the variable's shape {list(shape)}"
        want.append(span)
    if s.shape is not None and tuple(want) != s.shape:
        return f"slice [{spec}] has shape {list(s.shape)} but spans {want}"
    return None


def check_slices(index: BundleIndex) -> list[Finding]:
    """Findings for sliced variables; inconsistent slice entries get ``problem`` set."""
    findings: list[Finding] = []
    ev = str(index_path(index.prefix))
    slices: dict[str, list[BundleEntry]] = defaultdict(list)
    for e in index.entries:
        if e.is_slice and e.parent is not None:
            slices[e.parent].append(e)
    parents = {e.key: e for e in index.entries if e.is_sliced_parent}
    for name, pieces in slices.items():
        parent = parents.get(name)
        for s in pieces:
            s.problem = (f"slice [{s.slice.text() if s.slice else '?'}] of a variable with no "
                         "sliced entry") if parent is None else _slice_problem(
                parent, s, {x.text() for x in parent.slices})
            if s.problem:
                findings.append(Finding("TB015", Severity.ERROR, f"{name}: {s.problem}",
                                        evidence=ev, source="tensorbundle", tensors=(name,)))
    for parent in parents.values():
        have = {s.slice.text() for s in slices.get(parent.key, []) if s.slice is not None}
        missing = [s.text() for s in parent.slices if s.text() not in have]
        if missing:
            findings.append(Finding(
                "TB013", Severity.ERROR,
                f"{parent.key}: {len(missing)} of {len(parent.slices)} slices have no entry",
                evidence=ev, source="tensorbundle", tensors=(parent.key,),
                details={"missing_slices": missing}))
    return findings
