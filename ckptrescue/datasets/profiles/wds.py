"""WebDataset tar shards: one record per sample key, one field per member extension.

Members are grouped by consecutive sample key (``dir/000123.jpg`` and ``dir/000123.cls`` are the
sample ``dir/000123`` with fields ``jpg`` and ``cls``), as WebDataset groups them. Small members
are held as bytes (text extensions decoded, ``cls``/``label``/``index`` as integers, ``json``
parsed and flattened as ``json.<key>``); a member over :data:`INLINE_MAX` bytes streams through a
digest and becomes an :class:`~ckptrescue.datasets.profiles.values.Opaque` (its size and digest), so memory
stays bounded whatever the member size.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Iterator
from typing import IO, Any

from ckptrescue.datasets.profiles.values import Opaque, flatten
from ckptrescue.datasets.tarshards import sample_key

INLINE_MAX = 1 << 20
TEXT_EXTS = frozenset({"txt", "text", "caption", "md", "html"})
INT_EXTS = frozenset({"cls", "cls2", "label", "index", "idx", "id"})


def _extension(name: str) -> str:
    base = name.rsplit("/", 1)[-1]
    return base.split(".", 1)[1] if "." in base[1:] else ""


def _value(ext: str, data: bytes) -> Any:
    last = ext.rsplit(".", 1)[-1].lower()
    if last in TEXT_EXTS or last in INT_EXTS or last == "json":
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return data
        if last in INT_EXTS:
            try:
                return int(text.strip())
            except ValueError:
                return text
        if last == "json":
            try:
                return json.loads(text)
            except (ValueError, RecursionError):
                return text
        return text
    return data


def _member(tar: tarfile.TarFile, info: tarfile.TarInfo) -> bytes | Opaque:
    fh = tar.extractfile(info)
    if fh is None:
        return b""
    if info.size <= INLINE_MAX:
        return fh.read()
    h = hashlib.blake2b(digest_size=16)
    size = 0
    while chunk := fh.read(1 << 20):
        h.update(chunk)
        size += len(chunk)
    return Opaque(size, h.digest())


def iter_samples(fh: IO[bytes]) -> Iterator[dict[str, Any]]:
    """Every sample of the tar stream ``fh`` as a flattened record (raises ``tarfile.TarError``
    or ``EOFError`` on a damaged stream)."""
    current: str | None = None
    record: dict[str, Any] = {}
    with tarfile.open(fileobj=fh, mode="r|") as tar:  # type: ignore[call-overload]
        for info in tar:
            if not info.isfile():
                continue
            key = sample_key(info.name)
            if current is not None and key != current:
                yield record
                record = {}
            current = key
            ext = _extension(info.name) or "$"
            raw = _member(tar, info)
            value = _value(ext, raw) if isinstance(raw, bytes) else raw
            if ext.rsplit(".", 1)[-1].lower() == "json" and isinstance(value, dict):
                for k, v in flatten(value).items():
                    record[f"{ext}.{k}"] = v
            else:
                record[ext] = value
    if current is not None:
        yield record
