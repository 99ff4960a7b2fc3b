"""Cross-rank rules shared by the tensor-parallel families (DeepSpeed mp ranks, Megatron TP):

* :func:`tp_shards`: the shards of one parameter across TP ranks agree on dtype and rank (ndim),
  differ along at most one dimension (the split dimension) and have the same size along it (the
  split is even), else ``FM005`` naming the odd rank and the tensor;
* :func:`replicated`: tensors the format replicates on every TP rank (norm weights and biases)
  have the same CRC-32 on every rank (from the zip records: no full reads), else ``FM006``;
* :func:`optimizer_steps`: the values of the optimizer's 0-d ``step`` tensors of a member, read
  from their bytes (a few bytes each).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from ckptrescue.checkpoints.families.base import MemberSummary, finding
from ckptrescue.checkpoints.families.pickles import scalar_value
from ckptrescue.model import Finding

# Tensors every TP rank holds a full copy of (Megatron: LayerNorm/RMSNorm weight and bias,
# q/k layernorm, the final norm). Their bytes must be identical across TP ranks.
REPLICATED = re.compile(r"(^|[._])(input_layernorm|post_attention_layernorm|pre_mlp_layernorm|"
                        r"final_layernorm|final_norm|layernorm|layer_norm|ln_f|ln_\d|norm|"
                        r"q_layernorm|k_layernorm)[._](weight|bias)$")
MAX_NAMED = 16


def majority(values: list[object]) -> object:
    return Counter(values).most_common(1)[0][0]


def tp_shards(groups: dict[str, list[MemberSummary]], evidence: Path) -> list[Finding]:
    """``groups``: a label (the PP stage) -> the TP ranks' summaries of that stage, in TP order.
    Each tensor present on every TP rank is checked as a sharded parameter."""
    out: list[Finding] = []
    for stage, members in groups.items():
        if len(members) < 2:
            continue
        names = set(members[0].tensors)
        for m in members[1:]:
            names &= set(m.tensors)
        bad: dict[str, list[str]] = {}
        for name in sorted(names):
            entries = [m.tensors[name] for m in members]
            if any(shape is None for _dtype, shape in entries):
                continue
            dtypes = [d for d, _s in entries]
            shapes = [tuple(s) for _d, s in entries if s is not None]
            odd: set[int] = set()
            why = ""
            common_dtype = majority(dtypes)
            odd |= {i for i, d in enumerate(dtypes) if d != common_dtype}
            if odd:
                why = f"dtype differs (the other ranks: {common_dtype})"
            ndim = majority([len(s) for s in shapes])
            odd_ndim = {i for i, s in enumerate(shapes) if len(s) != ndim}
            if odd_ndim:
                odd |= odd_ndim
                why = why or f"rank of the tensor differs (the other ranks: {ndim} dims)"
            rest = [i for i in range(len(shapes)) if i not in odd]
            if len(rest) >= 2:
                # along each dimension the majority size; a rank differing from it is odd (an
                # uneven split or a wrong non-split dim: both are a wrong shape on that rank)
                for dim in range(ndim):
                    sizes = [shapes[i][dim] for i in rest]
                    common = majority(sizes)
                    for i in rest:
                        if shapes[i][dim] != common:
                            odd.add(i)
                            why = why or (f"dim {dim} is {shapes[i][dim]}, "
                                          f"{common} on the other ranks")
            for i in sorted(odd):
                bad.setdefault(members[i].member.rank, []).append(
                    f"{name} {list(shapes[i]) if i < len(shapes) else '?'}: {why}")
        for rank, items in sorted(bad.items()):
            out.append(finding(
                "FM005", f"{rank}: {len(items)} tensor-parallel shard(s) disagree with the other "
                f"TP ranks of {stage}: " + "; ".join(items[:4]) + (" ..." if len(items) > 4
                                                                     else ""),
                evidence=next(m.member.path for m in members if m.member.rank == rank),
                ranks=[rank], tensors=[f"{rank}/{i.split(' ', 1)[0]}" for i in items[:MAX_NAMED]],
                details={"stage": stage, "shards": items[:64]}))
    return out


def replicated(groups: dict[str, list[MemberSummary]], evidence: Path,
               pattern: re.Pattern[str] = REPLICATED) -> list[Finding]:
    """Replicated tensors (``pattern``) must carry the same record CRC-32 on every TP rank."""
    out: list[Finding] = []
    for stage, members in groups.items():
        if len(members) < 2:
            continue
        names = {n for n in members[0].checksums if pattern.search(n)}
        for m in members[1:]:
            names &= set(m.checksums)
        differing: dict[str, list[str]] = {}
        for name in sorted(names):
            crcs = [m.checksums[name] for m in members]
            if len(set(crcs)) == 1:
                continue
            common = majority(crcs)
            strict = crcs.count(common) * 2 > len(crcs)  # else no side can be trusted: name all
            for m, crc in zip(members, crcs, strict=True):
                if crc != common or not strict:
                    differing.setdefault(m.member.rank, []).append(name)
        for rank, items in sorted(differing.items()):
            out.append(finding(
                "FM006", f"{rank}: {len(items)} replicated tensor(s) differ from the other TP "
                f"ranks of {stage} (CRC-32): " + ", ".join(items[:6])
                + (" ..." if len(items) > 6 else ""),
                evidence=next(m.member.path for m in members if m.member.rank == rank),
                ranks=[rank], tensors=[f"{rank}/{n}" for n in items[:MAX_NAMED]],
                details={"stage": stage, "tensors": items[:64]}))
    return out


def optimizer_steps(path: Path, records: list) -> list[int | float]:  # noqa: ANN001
    """Values of the 0-d ``...state.<i>.step`` tensors in a member (bounded: first 64)."""
    values: list[int | float] = []
    for rec in records:
        if not rec.name.endswith(".step") or rec.shape not in ((), None) \
                or ".state." not in f".{rec.name}":
            continue
        if rec.status not in ("ok", "unverified"):
            continue
        value = scalar_value(Path(rec.file or path), rec.offset, rec.dtype)
        if value is not None:
            values.append(value)
        if len(values) >= 64:
            break
    return values
