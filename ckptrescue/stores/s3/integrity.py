"""Decide how one object can be verified and check a byte stream against it (pure, no network).

Given what S3 said about an object (:class:`ObjectHead`) and, for multipart objects, the real part
layout (:class:`PartLayout`), :func:`make_plan` picks the best evidence the object carries:

1. the strongest ``Checksum*`` we can recompute (SHA256 > SHA512 > CRC64NVME > CRC32C > CRC32 >
   SHA1 > MD5), full-object or composite — the form comes from ``ChecksumType``, else from a
   ``-N`` suffix, else both are tried for a multipart object (never inferred from the algorithm);
2. else the ETag: single-part MD5, or the multipart MD5-of-MD5s with the discovered part sizes
   (guessed from common part sizes only when the server gave none); never for SSE-KMS/SSE-C;
3. else rclone's ``x-amz-meta-md5chksum``;
4. else the object is unverifiable without downloading it.

The plan is then fed the bytes (a local file, or an object as it downloads) in one streaming pass
and :meth:`Plan.finish` returns a :class:`Check`: match / mismatch (naming the differing parts
when per-part values allow) / unverifiable, with the reason.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ckptrescue.model import JsonObject
from ckptrescue.stores.s3.checksums import (
    KNOWN_UNSUPPORTED,
    PREFERENCE,
    ChecksumValue,
    DigestSet,
    b64,
    etag_is_md5,
    parse_etag,
    part_offsets,
    valid_width,
)

MiB = 1 << 20
COMMON_PART_SIZES_MIB = (5, 8, 16, 32, 64, 100, 128, 256, 512)
_FRAME_HEAD = re.compile(rb"^[0-9a-fA-F]+(;chunk-signature=[0-9a-f]{64})?\r\n")
_FRAME_TAIL = re.compile(
    rb"\r\n0(;chunk-signature=[0-9a-f]{64})?\r\n"
    rb"(?P<trailers>(x-amz-checksum-[a-z0-9]+:[A-Za-z0-9+/=]+\r\n)+)"
    rb"(x-amz-trailer-signature:[0-9a-f]+\r\n)?\r\n$")


def aws_chunked_framing(head: bytes, tail: bytes) -> str | None:
    """Describe aws-chunked framing stored *inside* an object body (a bug of some S3-compatible
    stores: chunk headers and the ``x-amz-checksum-*`` trailer saved as content), else None."""
    if not _FRAME_HEAD.match(head):
        return None
    match = _FRAME_TAIL.search(tail)
    if not match:
        return None
    trailers = match["trailers"].decode("ascii", "replace").strip().replace("\r\n", ", ")
    return ("the bytes look aws-chunked framed (chunk headers and the trailer "
            f"{trailers} stored inside the object): de-frame before use")


@dataclass
class ObjectHead:
    """What HeadObject (with ``ChecksumMode=ENABLED``) said about one object version."""

    bucket: str
    key: str
    size: int | None
    etag: str | None = None
    version_id: str | None = None
    last_modified: str | None = None
    checksums: dict[str, ChecksumValue] = field(default_factory=dict)
    checksum_type: str | None = None
    parts_count: int | None = None
    sse: str | None = None
    sse_customer_algorithm: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    object_lock_mode: str | None = None
    object_lock_retain_until: str | None = None
    legal_hold: str | None = None

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    @property
    def part_count(self) -> int | None:
        """N when the object is a multipart upload (from ``-N`` suffixes or PartsCount)."""
        _, n = parse_etag(self.etag)
        for value in self.checksums.values():
            n = n or value.parts
        return n or self.parts_count

    @property
    def etag_is_md5_of_content(self) -> bool:
        return not (self.sse in {"aws:kms", "aws:kms:dsse"} or self.sse_customer_algorithm)

    def best_checksum(self) -> ChecksumValue | None:
        for alg in PREFERENCE:
            value = self.checksums.get(alg)
            if value is not None and valid_width(alg, value.value):
                return value
        return None

    def checksum_json(self) -> dict[str, Any] | None:
        best = self.best_checksum()
        if best is None:
            return None
        out = best.to_json()
        if out["type"] is None:
            out["type"] = self.checksum_type
        if out["type"] is None and best.parts:
            out["type"] = "COMPOSITE"
        elif out["type"] is None and not self.part_count:
            out["type"] = "FULL_OBJECT"  # a single-part upload is always full-object
        return out

    def to_json(self) -> JsonObject:
        return {
            "bucket": self.bucket,
            "key": self.key,
            "version_id": self.version_id,
            "size": self.size,
            "etag": self.etag,
            "last_modified": self.last_modified,
            "checksums": {k: v.display for k, v in sorted(self.checksums.items())},
            "checksum_type": self.checksum_type,
            "parts": self.part_count,
            "sse": self.sse,
            "object_lock": {
                "mode": self.object_lock_mode,
                "retain_until": self.object_lock_retain_until,
                "legal_hold": self.legal_hold,
            },
        }


@dataclass
class PartLayout:
    """Real part boundaries of a multipart object and any per-part values the server gave.

    ``part_md5s`` (hex) and ``part_checksums`` (algorithm -> Base64 list) are kept only when they
    reproduce the object's own ETag / composite value, so a store that echoes the object value on
    part requests cannot make us blame the wrong part.
    """

    sizes: list[int]
    source: str
    part_md5s: list[str] | None = None
    part_checksums: dict[str, list[str]] = field(default_factory=dict)
    checksum_type: str | None = None

    def to_json(self) -> JsonObject:
        return {"parts": len(self.sizes), "sizes": self.sizes, "source": self.source}


@dataclass
class Check:
    """The outcome of verifying one byte stream against one object."""

    status: str  # match | mismatch | unverifiable
    algorithm: str | None
    message: str
    form: str | None = None  # full-object | composite | etag-md5 | etag-multipart | md5chksum
    expected: str | None = None
    actual: str | None = None
    bad_parts: list[dict[str, int]] = field(default_factory=list)
    provenance: str | None = None
    size: int = 0
    sha256: str | None = None
    framing: str | None = None
    # connection resets in the middle of the body, each resumed with a ranged GET of the same
    # ETag (``objects.stream_body``): reported, never hidden
    resets: list[dict[str, Any]] = field(default_factory=list)

    def detail(self) -> dict[str, Any]:
        out: dict[str, Any] = {"message": self.message}
        for name in ("form", "expected", "actual", "provenance", "framing"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.bad_parts:
            out["parts"] = self.bad_parts
        if self.resets:
            out["resets"] = self.resets
            out["message"] = (f"{self.message}; the connection was reset {len(self.resets)} "
                              "time(s) mid-body and the read resumed from byte "
                              f"{', '.join(str(r['at']) for r in self.resets)}")
        return out


def guess_part_sizes(size: int, parts: int) -> list[list[int]]:
    """Candidate part layouts for an N-part object of ``size`` bytes (common uploader defaults)."""
    if parts <= 1:
        return [[size]]
    candidates: list[int] = []
    even = math.ceil(size / parts)
    candidates.append(math.ceil(even / MiB) * MiB)
    candidates.extend(m * MiB for m in COMMON_PART_SIZES_MIB)
    candidates.append(even)
    out: list[list[int]] = []
    for part_size in dict.fromkeys(candidates):
        if part_size <= 0 or math.ceil(size / part_size) != parts:
            continue
        last = size - part_size * (parts - 1)
        if last <= 0:
            continue
        out.append([part_size] * (parts - 1) + [last])
    return out


@dataclass
class Plan:
    """How to verify one object; feed it the bytes, then :meth:`finish`."""

    head: ObjectHead
    form: str  # full-object | composite | either | etag-md5 | etag-multipart | md5chksum | none
    algorithm: str | None
    candidates: list[DigestSet]
    expected: str | None
    reason: str = ""
    provenance: str = "client-asserted"
    layout: PartLayout | None = None
    guessed: bool = False
    _head: bytes = b""
    _tail: bytes = b""

    def update(self, data: bytes) -> None:
        for digests in self.candidates:
            digests.update(data)
        if len(self._head) < 128:
            self._head += bytes(data[: 128 - len(self._head)])
        self._tail = (self._tail + bytes(data[-1024:]))[-1024:]

    def finish(self) -> Check:
        for digests in self.candidates:
            digests.finish()
        main = self.candidates[0]
        sha256 = main.hexdigest("SHA256") if "SHA256" in main.full else None
        check = self._compare(main)
        check.size = main.size
        check.sha256 = sha256
        check.framing = aws_chunked_framing(self._head, self._tail)
        return check

    # -- comparison ------------------------------------------------------------------------------
    def _base(self, status: str, message: str, **kw: Any) -> Check:
        return Check(
            status=status,
            algorithm=self.algorithm,
            message=message,
            form=kw.pop("form", self.form),
            provenance=kw.pop("provenance", self.provenance),
            **kw,
        )

    def _compare(self, main: DigestSet) -> Check:
        head = self.head
        if self.form == "none":
            return self._base("unverifiable", self.reason, form=None, provenance=None)
        if head.size is not None and main.size != head.size:
            return self._base(
                "mismatch",
                f"size differs: local {main.size} bytes, remote {head.size} bytes",
                expected=str(head.size),
                actual=str(main.size),
            )
        alg = self.algorithm
        if self.form == "full-object" and alg:
            return self._verdict(main.value(alg), "full-object", main)
        if self.form == "composite" and alg:
            return self._best_candidate(lambda d: d.composite_value(alg), "composite")
        if self.form == "either" and alg:
            full = main.value(alg)
            if full == self.expected:
                return self._verdict(full, "full-object", main)
            if main.per_part:
                return self._best_candidate(lambda d: d.composite_value(alg), "composite")
            return self._verdict(full, "full-object", main)
        if self.form == "etag-md5":
            return self._verdict(main.hexdigest("MD5"), "etag-md5", main)
        if self.form == "etag-multipart":
            return self._best_candidate(lambda d: d.multipart_etag().split("-")[0],
                                        "etag-multipart")
        if self.form == "md5chksum":
            return self._verdict(b64(main.digest("MD5")), "md5chksum", main)
        return self._base("unverifiable", self.reason or "no usable checksum", form=None)

    def _best_candidate(self, compute: Any, form: str) -> Check:
        values = [compute(d) for d in self.candidates]
        for digests, value in zip(self.candidates, values, strict=True):
            if value == self.expected:
                return self._verdict(value, form, digests)
        return self._verdict(values[0], form, self.candidates[0])

    def _verdict(self, actual: str, form: str, digests: DigestSet) -> Check:
        expected = self.expected
        shown = expected
        if form in {"composite", "etag-multipart"} and digests.part_sizes:
            shown = f"{expected}-{len(digests.part_sizes)}"
            actual_shown = f"{actual}-{len(digests.part_sizes)}"
        else:
            actual_shown = actual
        label = {
            "full-object": f"{self.algorithm} full-object checksum",
            "composite": f"{self.algorithm} composite checksum over "
            f"{len(digests.part_sizes)} part(s)",
            "etag-md5": "ETag (MD5)",
            "etag-multipart": f"multipart ETag over {len(digests.part_sizes)} part(s)",
            "md5chksum": "x-amz-meta-md5chksum (MD5, client-asserted)",
        }[form]
        guessed = " (part sizes guessed from common uploader defaults)" if self.guessed else ""
        if actual == expected:
            return self._base(
                "match", f"{label} matches{guessed}", form=form, expected=shown, actual=actual_shown
            )
        bad = self._bad_parts(digests) if form != "full-object" or self.layout else []
        where = ""
        if bad:
            where = "; differing part(s): " + ", ".join(
                f"#{p['part']} (bytes {p['offset']}..{p['offset'] + p['length'] - 1})" for p in bad
            )
        elif form in {"composite", "etag-multipart"}:
            where = "; the server gave no per-part values, so the part cannot be named"
        return self._base(
            "mismatch",
            f"{label} differs{guessed}{where}",
            form=form,
            expected=shown,
            actual=actual_shown,
            bad_parts=bad,
        )

    def _bad_parts(self, digests: DigestSet) -> list[dict[str, int]]:
        layout = self.layout
        if layout is None or not digests.per_part or list(digests.part_sizes) != layout.sizes:
            return []
        offsets = part_offsets(layout.sizes)
        local: list[str] | None = None
        remote: list[str] | None = None
        alg = self.algorithm
        if alg and alg in layout.part_checksums and alg in digests.per_part:
            remote = layout.part_checksums[alg]
            local = [b64(d) for d in digests.part_digests(alg)]
        elif layout.part_md5s is not None and "MD5" in digests.per_part:
            remote = layout.part_md5s
            local = [d.hex() for d in digests.part_digests("MD5")]
        if local is None or remote is None or len(local) != len(remote):
            return []
        return [
            {"part": i + 1, "offset": offsets[i][0], "length": offsets[i][1]}
            for i, (a, b) in enumerate(zip(local, remote, strict=True))
            if a != b
        ]


def make_plan(
    head: ObjectHead,
    layout: PartLayout | None = None,
    *,
    also: Sequence[str] = ("SHA256",),
    provenance: str = "client-asserted",
) -> Plan:
    """Choose the best verification for ``head`` (see module doc)."""
    parts = head.part_count
    unusable: list[str] = []
    for alg in PREFERENCE:
        value = head.checksums.get(alg)
        if value is None:
            continue
        if not valid_width(alg, value.value):
            unusable.append(f"stored Checksum{alg} {value.display!r} is not a valid {alg} value")
            continue
        ctype = value.checksum_type or head.checksum_type
        ctype = ctype or (layout.checksum_type if layout else None)
        if ctype is None and value.parts:
            ctype = "COMPOSITE"
        if ctype is None and not parts:
            ctype = "FULL_OBJECT"
        return _checksum_plan(head, layout, value, ctype, also, provenance)
    # No recomputable checksum: the ETag.
    others = sorted(set(head.checksums) - set(PREFERENCE))
    if others:
        unusable.append(
            "only " + ", ".join(f"Checksum{o}" for o in others) + " stored"
            + (" (not recomputed by this kit)" if set(others) & KNOWN_UNSUPPORTED else "")
        )
    full = list(dict.fromkeys([*also, "MD5"]))
    etag_value, etag_parts = parse_etag(head.etag)
    if head.etag and head.etag_is_md5_of_content:
        if etag_is_md5(head.etag):
            return Plan(head, "etag-md5", "MD5", [DigestSet(full=full)], etag_value,
                        provenance=_etag_provenance(provenance))
        if etag_parts:
            sizes, guessed = _layout_candidates(head, layout, etag_parts)
            if sizes:
                cands = [DigestSet(full=full, per_part=["MD5"], part_sizes=s) for s in sizes]
                return Plan(head, "etag-multipart", "MD5", cands, etag_value, layout=layout,
                            guessed=guessed, provenance=_etag_provenance(provenance))
            unusable.append(f"multipart ETag over {etag_parts} parts but part sizes unknown")
    elif head.etag:
        unusable.append(
            "ETag is not an MD5 of the content (encryption "
            f"{'SSE-C' if head.sse_customer_algorithm else head.sse})"
        )
    md5meta = head.metadata.get("md5chksum")
    if md5meta and _is_b64_md5(md5meta):
        return Plan(head, "md5chksum", "MD5", [DigestSet(full=full)], md5meta,
                    provenance="client-asserted")
    reason = "; ".join(unusable) or "no checksum and no usable ETag"
    return Plan(head, "none", None, [DigestSet(full=list(also))], None, reason=reason)


def _checksum_plan(
    head: ObjectHead,
    layout: PartLayout | None,
    value: ChecksumValue,
    ctype: str | None,
    also: Sequence[str],
    provenance: str,
) -> Plan:
    alg = value.algorithm
    full = list(dict.fromkeys([alg, *also]))
    if ctype == "FULL_OBJECT":
        per_part: list[str] = []
        sizes = [layout.sizes] if layout else []
        if layout and (alg in layout.part_checksums or layout.part_md5s):
            per_part = [alg, "MD5"]
        cands = [DigestSet(full=full, per_part=per_part, part_sizes=sizes[0] if per_part else ())]
        return Plan(head, "full-object", alg, cands, value.value, provenance=provenance,
                    layout=layout)
    parts = value.parts or head.part_count or (len(layout.sizes) if layout else None)
    if not parts:
        return Plan(head, "full-object", alg, [DigestSet(full=full)], value.value,
                    provenance=provenance)
    sizes_list, guessed = _layout_candidates(head, layout, parts)
    if not sizes_list:
        if ctype is None:  # unknown type, no layout: at least try the full-object form
            return Plan(head, "either", alg, [DigestSet(full=full)], value.value,
                        provenance=provenance)
        return Plan(head, "none", alg, [DigestSet(full=list(also))], None,
                    reason=f"{alg} composite checksum over {parts} part(s) but part sizes unknown")
    cands = [DigestSet(full=full, per_part=[alg, "MD5"], part_sizes=s) for s in sizes_list]
    form = "composite" if ctype == "COMPOSITE" else "either"
    return Plan(head, form, alg, cands, value.value, provenance=provenance, layout=layout,
                guessed=guessed)


def _layout_candidates(
    head: ObjectHead, layout: PartLayout | None, parts: int
) -> tuple[list[list[int]], bool]:
    if layout is not None and len(layout.sizes) == parts:
        return [layout.sizes], False
    if head.size is None:
        return [], False
    return guess_part_sizes(head.size, parts), parts > 1


def _etag_provenance(provenance: str) -> str:
    return "server-computed" if provenance == "server-verified" else "server-reported"


def _is_b64_md5(text: str) -> bool:
    try:
        return len(base64.b64decode(text, validate=True)) == 16
    except (binascii.Error, ValueError):
        return False
