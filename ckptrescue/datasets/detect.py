"""Which container format a dataset file is, from its name and its first bytes.

Pure: name and head bytes in, a short format name out: ``tfrecord``, ``tar``, ``parquet``,
``jsonl``, ``npy``, ``npz`` or ``other``. Compression suffixes are noted with ``+gzip``. TFRecord
has no magic number, so an unnamed file is called TFRecord only when its first record header's
length CRC is valid.
"""

from __future__ import annotations

import os
import re
import struct

from ckptrescue.checkpoints.formats.crc32c import masked_crc32c_short
from ckptrescue.datasets import format_heads

HEAD_BYTES = 512

_TFRECORD_NAME = re.compile(rb"\.(tfrecords?|tfrec)(-\d+-of-\d+)?$|\.tfrecords?-\d+")
_SUFFIXES = (
    ((b".tar", b".tar.gz", b".tgz"), "tar"),
    ((b".parquet", b".pq"), "parquet"),
    ((b".jsonl", b".ndjson", b".jsonl.gz", b".ndjson.gz"), "jsonl"),
    ((b".npy",), "npy"),
    ((b".npz",), "npz"),
)


def detect(name: bytes | str, head: bytes) -> str:
    """The format of a file called ``name`` whose first bytes are ``head``."""
    base = os.fsencode(name).rsplit(b"/", 1)[-1].lower()
    gz = head[:2] == b"\x1f\x8b"
    stem = base[:-3] if base.endswith(b".gz") else base
    if _TFRECORD_NAME.search(stem):
        return "tfrecord+gzip" if gz else "tfrecord"
    for suffixes, fmt in _SUFFIXES:
        if base.endswith(suffixes):
            if fmt in ("tar", "jsonl") and gz:
                return fmt + "+gzip"
            return fmt
    if head[:4] == b"PAR1":
        return "parquet"
    if head[:6] == b"\x93NUMPY":
        return "npy"
    if len(head) >= 262 and head[257:262] == b"ustar":
        return "tar"
    if format_heads.arrow_file(head):
        return "arrow"
    if format_heads.arrow_stream_message(head) is not None:
        from ckptrescue.datasets import arrow_ipc  # its flatbuffer parser: a plausible head only

        if arrow_ipc.looks_like_stream(head):
            return "arrow"
    if format_heads.megatron_index(head):
        return "megatron"
    if format_heads.mds_shard(head):
        return "mds"
    if format_heads.mds_index(head):
        return "mds-index"
    if format_heads.hf_state(head) or format_heads.hf_builder_info(head):
        return "hf-datasets"
    if looks_like_tfrecord(head):
        return "tfrecord"
    return "other"


def looks_like_tfrecord(head: bytes) -> bool:
    if len(head) < 12:
        return False
    (crc,) = struct.unpack_from("<I", head, 8)
    return masked_crc32c_short(head[:8]) == crc
