"""Static scans of a torch zip's ``data.pkl``, done once per pickle and found again by its bytes.

One rank file's ``data.pkl`` used to be scanned up to three times in one probe: by a family's
layout read (``families/pickles.zip_pickle_root``, before any member is probed), by the format
probe under torch's rules (``torch_zip_records.read_pickle``), and by the family's metadata reader
(``families/pickles.data_pkl_root``). The static scan is the costly part of a probe's metadata
(it interprets every opcode in Python). Here each is done once:

* :func:`torch_scan` is the scan under torch's rules (``torch_rebuild.scan_torch_pickle``, as
  ``torch.load`` feeds ``data.pkl``), kept by the digest of the bytes and where they start in
  the file (positions in a scan are file offsets);
* :func:`plain_root` is the object graph a plain memory-mode scan builds: the kept rules scan's
  root where the rules changed nothing in the graph (:func:`rules_changed_nothing`: no parse
  error, refusal, FRAME overrun, scan limit or storage key with two types), else its own scan.

Found by content, never by name: bytes that changed in between, or a record read at other
offsets, are scanned again. Bounded: the :data:`KEEP` most recent pickles of at most
:data:`MAX_BYTES` in all, in this process only. What is returned is shared between readers
(identical files share one scan): read it, never change it.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from ckptrescue.checkpoints.formats import pickle_scan, torch_rebuild

KEEP = 8
MAX_BYTES = 16 << 20


@dataclass
class _Kept:
    size: int
    torch: dict[int, pickle_scan.PickleScan] = field(default_factory=dict)  # by start offset
    plain: tuple[Any] | None = None  # (root,) of a plain scan


_KEPT: OrderedDict[bytes, _Kept] = OrderedDict()  # BLAKE2b of the bytes -> their scans
_MUTEX = threading.Lock()


def rules_changed_nothing(scan: pickle_scan.PickleScan) -> bool:
    """The rules scan's graph is what a plain scan, in either feeding mode, builds."""
    return (scan.error is None and not scan.refusals and not scan.frame_violations
            and scan.limit is None and not scan.storage_conflicts)


def _key(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=32).digest()


def _kept(key: bytes) -> _Kept | None:
    with _MUTEX:
        kept = _KEPT.get(key)
        if kept is not None:
            _KEPT.move_to_end(key)
        return kept


def _keep(key: bytes, size: int, *, start: int | None = None,
          scan: pickle_scan.PickleScan | None = None, plain: tuple[Any] | None = None) -> None:
    if size > MAX_BYTES:
        return
    with _MUTEX:
        kept = _KEPT.setdefault(key, _Kept(size))
        _KEPT.move_to_end(key)
        if scan is not None and start is not None:
            kept.torch[start] = scan
        if plain is not None:
            kept.plain = plain
        total = sum(k.size for k in _KEPT.values())
        while len(_KEPT) > KEEP or total > MAX_BYTES:
            total -= _KEPT.popitem(last=False)[1].size


def torch_scan(data: bytes, start: int = 0) -> pickle_scan.PickleScan:
    """``torch_rebuild.scan_torch_pickle(data, start=start)``, done once for these bytes at this
    offset; raises :class:`pickle_scan.PickleError` as it does (a failed scan is not kept)."""
    key = _key(data)
    kept = _kept(key)
    if kept is not None and start in kept.torch:
        return kept.torch[start]
    scan = torch_rebuild.scan_torch_pickle(data, start=start)
    _keep(key, len(data), start=start, scan=scan)
    return scan


def plain_root(data: bytes, start: int = 0) -> Any:
    """The root a plain memory-mode scan of ``data`` builds (``partial``: up to a parse error):
    a kept rules scan's where the rules changed nothing, else scanned (and kept) here. A
    pickle starting at ``start`` in its file is scanned under torch's rules first (and kept),
    so that the probe of the same record finds its scan done."""
    key = _key(data)
    kept = _kept(key)
    if kept is not None:
        if kept.plain is not None:
            return kept.plain[0]
        for scan in kept.torch.values():
            if rules_changed_nothing(scan):
                return scan.root
    try:
        scan = torch_scan(data, start)
    except pickle_scan.PickleError:
        scan = None
    if scan is not None and rules_changed_nothing(scan):
        return scan.root
    root = pickle_scan.scan_pickle(data, mode="memory", partial=True).root
    _keep(key, len(data), plain=(root,))
    return root


def forget() -> None:
    """Drop every kept scan (tests; a long-lived process that wants the memory back)."""
    with _MUTEX:
        _KEPT.clear()
