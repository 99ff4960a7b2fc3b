"""Does each DeepSpeed ZeRO-1/2 optimizer file hold the partition of the rank its name claims?

``zero_to_fp32`` and ``engine.load_checkpoint`` take a file's rank from its NAME
(``zero_pp_rank_<r>_...``): two ranks' files swapped by name consolidate, without an error, into
other weights. The files' own content says which partition they hold; this module checks it
against the name (DeepSpeed 0.19 ``runtime/zero/stage_1_and_2.py`` and ``bf16_optimizer.py``):

* The flat layout of a param group: the parameters in ``param_shapes`` order (the model states
  file; the round-robin order the optimizer flattened them in), each followed by its
  ``param_alignment_paddings`` entry (the optimizer state; absent before 0.18: zeros). Rank ``r``
  owns flat elements ``[r*P, (r+1)*P)``, ``P`` = the numel of its
  ``single_partition_of_fp32_groups[g]`` (``_link_all_hp_params``: ``partition_start =
  partition_id * partition_size``).
* ``param_slice_mappings[g]`` (``_create_param_mapping`` via ``tensor_fragment.
  get_hp_fragment_mapping``) names each parameter intersecting that range with
  ``fragment_address(start = fragment_start - partition_start, numel)``: it must equal what the
  layout gives for the claimed rank.
* The fp32 master partition must equal the model states' parameters over the same flat range
  (after ``step`` the optimizer copies the master into the module's parameters: equal for fp32,
  the master rounded to nearest-even for bf16/fp16). Compared in windows (at most
  :data:`MAX_COMPARE` elements per group and rank, read with ``pread``), so the cost stays flat in
  the model size.

A file whose mapping or master weights fit another rank is named with that rank (FM034, the
step ``damaged``). ZeRO-3 files carry nothing rank-specific (``fp32_flat_groups`` are per-param
slices of equal size on every rank; the model states hold no weights): a swap there is not
detectable from the files, and this module says nothing about it.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Any

from ckptrescue.checkpoints.families.base import MemberSummary, finding
from ckptrescue.checkpoints.formats.regular_file import open_regular
from ckptrescue.model import Finding

MAX_COMPARE = 1 << 15  # elements compared per (group, rank)
MAX_PARAMS = 100_000  # parameters per group kept in a summary
ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2}

# (file, offset, length, dtype, numel)
Extent = tuple[str, int, int, str, int]


def param_shapes(meta_value: Any) -> list[list[tuple[str, int]]] | None:
    """``param_shapes`` (plain data: a list of name -> shape maps) as (name, numel) per group."""
    if isinstance(meta_value, dict):
        meta_value = [meta_value]
    if not isinstance(meta_value, list):
        return None
    groups: list[list[tuple[str, int]]] = []
    for group in meta_value:
        if not isinstance(group, dict):
            return None
        items: list[tuple[str, int]] = []
        for name, shape in list(group.items())[:MAX_PARAMS]:
            if isinstance(shape, dict):  # torch.Size as a call
                shape = shape.get("args", shape.get("value"))
                if isinstance(shape, list) and len(shape) == 1 and isinstance(shape[0], list):
                    shape = shape[0]
            if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0
                                                     for d in shape):
                return None
            items.append((str(name), math.prod(shape)))
        groups.append(items)
    return groups


def slice_mappings(value: Any) -> list[dict[str, tuple[int, int]]] | None:
    """``param_slice_mappings`` (plain data) as name -> (start, numel) per group."""
    if not isinstance(value, list):
        return None
    out: list[dict[str, tuple[int, int]]] = []
    for group in value:
        if not isinstance(group, dict):
            return None
        entries: dict[str, tuple[int, int]] = {}
        for name, addr in list(group.items())[:MAX_PARAMS]:
            if not isinstance(addr, dict) or not isinstance(addr.get("start"), int) \
                    or not isinstance(addr.get("numel"), int):
                return None
            entries[str(name)] = (addr["start"], addr["numel"])
        out.append(entries)
    return out


def expected_fragments(shapes: list[tuple[str, int]], paddings: list[int], size: int,
                       rank: int) -> dict[str, tuple[int, int, int]]:
    """name -> (hp start in the partition, numel, element offset in the parameter) for the
    parameters rank ``rank`` holds a fragment of (``tensor_fragment.get_hp_fragment_mapping``)."""
    out: dict[str, tuple[int, int, int]] = {}
    lo, hi = rank * size, (rank + 1) * size
    offset = 0
    for i, (name, numel) in enumerate(shapes):
        start, end = max(offset, lo), min(offset + numel, hi)
        if start < end:
            out[name] = (start - lo, end - start, start - offset)
        offset += numel + (paddings[i] if i < len(paddings) else 0)
        if offset >= hi:
            break
    return out


def _read(extent: Extent, first: int, count: int) -> bytes | None:
    file, offset, length, dtype, _numel = extent
    item = ITEMSIZE[dtype]
    if (first + count) * item > length:
        return None
    try:
        with open_regular(file) as fh:
            fh.seek(offset + first * item)
            data = fh.read(count * item)
    except OSError:
        return None
    return data if len(data) == count * item else None


def _as_model_dtype(master: bytes, dtype: str) -> bytes:
    """fp32 master values as the module's dtype would hold them (round to nearest even)."""
    if dtype == "float32":
        return master
    words = struct.unpack(f"<{len(master) // 4}I", master)
    if dtype == "bfloat16":
        out = []
        for u in words:
            if (u & 0x7F800000) == 0x7F800000 and u & 0x7FFFFF:
                out.append((u >> 16) | 0x40)  # NaN stays NaN
            else:
                out.append(((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF)
        return struct.pack(f"<{len(out)}H", *out)
    values = struct.unpack(f"<{len(words)}f", master)
    try:
        return struct.pack(f"<{len(values)}e", *values)
    except OverflowError:
        return b""


def _content_matches(frags: dict[str, tuple[int, int, int]], part: Extent,
                     module: dict[str, Extent]) -> bool | None:
    """Whether the master partition equals the module's parameters over ``frags`` (None: nothing
    comparable: a parameter's bytes unknown, non-contiguous or of another dtype)."""
    budget = MAX_COMPARE
    compared = 0
    for name, (hp_start, numel, lp_off) in frags.items():
        ext = module.get(name)
        if ext is None or ext[3] not in ITEMSIZE or part[3] != "float32":
            continue
        if ext[2] != ext[4] * ITEMSIZE[ext[3]]:
            continue  # a view: its bytes are not one run
        n = min(numel, budget)
        master = _read(part, hp_start, n)
        model = _read(ext, lp_off, n)
        if master is None or model is None:
            continue
        if _as_model_dtype(master, ext[3]) != model:
            return False
        compared += n
        budget -= n
        if budget <= 0:
            break
    return True if compared else None


def check(models: list[MemberSummary], optims: list[MemberSummary], dp: int | None,
          stage: int | None, round_robin: bool) -> list[Finding]:
    """FM034 for each ZeRO-1/2 optimizer file whose partition is not its named rank's."""
    if dp is None or stage is None or stage >= 3 or round_robin or dp < 1:
        return []
    by_mp = {s.member.rank: s for s in models if s.member.rank.startswith("mp_rank_")}
    out: list[Finding] = []
    for s in optims:
        rank_s, _, mp = s.member.rank.removeprefix("zero_pp_rank_").partition("_mp_rank_")
        model = by_mp.get(f"mp_rank_{mp}")
        if model is None or not rank_s.isdigit() or int(rank_s) >= dp:
            continue  # a rank beyond the world size is FM033's
        claimed = int(rank_s)
        shapes = model.scalars.get("param_shapes")
        module = model.scalars.get("module_extents") or {}
        parts = s.scalars.get("fp32_parts") or []
        mappings = s.scalars.get("slice_mappings")
        paddings = s.scalars.get("alignment_paddings") or []
        if not shapes or not parts or len(parts) != len(shapes):
            continue
        reasons: list[str] = []
        fits: set[int] = set(range(dp))
        for g, part in enumerate(parts):
            if part is None:
                continue
            size = part[4]
            pads = paddings[g] if g < len(paddings) and isinstance(paddings[g], list) else []
            total = sum(n for _name, n in shapes[g]) + sum(p for p in pads if isinstance(p, int))
            if size * dp < total:
                reasons.append(f"group {g}: partition of {size} elements x {dp} ranks < the "
                               f"{total} elements of the group's parameters")
                fits = set()
                continue
            per_rank = {r: expected_fragments(shapes[g], pads, size, r) for r in range(dp)}
            if mappings is not None and g < len(mappings):
                got = mappings[g]
                want = {r: {n: (a, b) for n, (a, b, _o) in frags.items()}
                        for r, frags in per_rank.items()}
                mapping_fits = {r for r in want if want[r] == got}
                if claimed not in mapping_fits:
                    reasons.append(f"group {g}: its fragment mapping ({_describe(got)}) is not "
                                   f"rank {claimed}'s ({_describe(want[claimed])})")
                fits &= mapping_fits
            same = _content_matches(per_rank[claimed], part, module)
            if same is False:
                content_fits = {r for r in range(dp) if r != claimed
                                and _content_matches(per_rank[r], part, module)}
                reasons.append(f"group {g}: its fp32 master weights differ from the model "
                               f"states' parameters over rank {claimed}'s range")
                fits &= content_fits
        if reasons:
            other = sorted(fits - {claimed})
            holds = (f"; it holds rank {other[0]}'s partition (swapped or copied by name)"
                     if len(other) == 1 else "")
            out.append(finding(
                "FM034", f"{s.member.path.name} is named rank {claimed} but its partition is not "
                f"rank {claimed}'s{holds}: " + "; ".join(reasons[:3]),
                evidence=s.member.path, ranks=[s.member.rank],
                details={"claimed_rank": claimed, "holds_rank": other[0] if len(other) == 1
                         else None, "reasons": reasons[:16]}))
    return out


def _describe(mapping: dict[str, tuple[int, int]]) -> str:
    items = [f"{n}@{a}+{b}" for n, (a, b) in list(mapping.items())[:4]]
    return ", ".join(items) + (" ..." if len(mapping) > 4 else "")


def summarize_model(summary: MemberSummary, meta: dict[str, Any], records: list[Any],
                    path: Path) -> None:
    """Keep what :func:`check` needs of a model states file: parameter order and extents."""
    summary.scalars["param_shapes"] = param_shapes(meta.get("param_shapes"))
    extents: dict[str, Extent] = {}
    for rec in records:
        if not rec.name.startswith("module.") or rec.dtype not in ITEMSIZE \
                or rec.offset is None or rec.length is None or rec.shape is None:
            continue
        extents[rec.name.removeprefix("module.")] = (str(rec.file or path), rec.offset,
                                                     rec.length, rec.dtype, math.prod(rec.shape))
        if len(extents) >= MAX_PARAMS:
            break
    summary.scalars["module_extents"] = extents


def summarize_optim(summary: MemberSummary, osd: dict[str, Any], records: list[Any],
                    path: Path) -> None:
    """Keep what :func:`check` needs of an optimizer file: mappings, paddings, fp32 parts."""
    summary.scalars["slice_mappings"] = slice_mappings(osd.get("param_slice_mappings"))
    pads = osd.get("param_alignment_paddings")
    summary.scalars["alignment_paddings"] = pads if isinstance(pads, list) else []
    parts: dict[int, Extent] = {}
    marker = "single_partition_of_fp32_groups."
    for rec in records:
        i = rec.name.find(marker)
        if i < 0 or rec.offset is None or rec.length is None or rec.shape is None:
            continue
        index = rec.name[i + len(marker):]
        if index.isdigit() and rec.dtype is not None:
            parts[int(index)] = (str(rec.file or path), rec.offset, rec.length, rec.dtype,
                                 math.prod(rec.shape))
    summary.scalars["fp32_parts"] = [parts.get(g) for g in range(max(parts) + 1)] \
        if parts else []
