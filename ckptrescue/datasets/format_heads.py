"""What the first bytes of each dataset container that has no fixed suffix look like: Arrow IPC
files and streams, megatron indexed datasets, MosaicML MDS shards and indexes, Hugging Face
``datasets`` metadata.

Pure: a file's head in, True or False out. Nothing here imports a reader, so
:func:`ckptrescue.datasets.detect.detect` can ask every file a manifest build or audit meets
without loading the readers of formats the file is not (about 5 ms of a command's start).
"""

from __future__ import annotations

import struct

ARROW_FILE_MAGIC = b"ARROW1"
ARROW_CONTINUATION = b"\xff\xff\xff\xff"
ARROW_MAX_METADATA = 64 << 20  # a Message flatbuffer larger than this is damage
MEGATRON_MAGIC = b"MMIDIDX\x00\x00"
MDS_MAX_CONFIG = 1 << 20  # a shard's config JSON


def arrow_file(head: bytes) -> bool:
    return head[:6] == ARROW_FILE_MAGIC


def arrow_stream_message(head: bytes) -> bytes | None:
    """The metadata of the first message of what may be an Arrow stream: None when its length
    field is not plausible (not a stream). Whether it is a Schema message takes the flatbuffer
    parser: :func:`ckptrescue.datasets.arrow_ipc.looks_like_stream`."""
    if head[:4] == ARROW_CONTINUATION and len(head) >= 8:
        meta = head[8:]
        (size,) = struct.unpack_from("<i", head, 4)
    elif len(head) >= 4:
        meta = head[4:]
        (size,) = struct.unpack_from("<i", head, 0)
    else:
        return None
    return meta[:size] if 8 <= size <= ARROW_MAX_METADATA else None


def megatron_index(head: bytes) -> bool:
    """The first bytes are a megatron index header (magic, version 1)."""
    return head[:9] == MEGATRON_MAGIC and head[9:17] == struct.pack("<Q", 1)


def mds_shard(head: bytes) -> bool:
    """An MDS shard's first bytes: the first offset points just past the table and a config
    JSON object starts right after the table (visible when the table fits in ``head``)."""
    if len(head) < 12:
        return False
    n, first = struct.unpack_from("<II", head)
    table_end = 8 + 4 * n
    if not table_end < first <= table_end + MDS_MAX_CONFIG:
        return False
    return table_end < len(head) and head[table_end:table_end + 2] == b'{"'


def mds_index(head: bytes) -> bool:
    """An MDS ``index.json`` (starts with the ``sort_keys`` dump of ``{"shards": ...``)."""
    text = head.lstrip()
    return (text.startswith(b'{"shards": [') and b'"raw_data"' in head) or \
        (text.startswith(b"{") and b'"shards"' in head and b'"raw_data"' in head)


def hf_state(head: bytes) -> bool:
    """A ``save_to_disk`` ``state.json`` (its first key is ``_data_files``)."""
    return head.lstrip().startswith(b"{") and b'"_data_files"' in head


def hf_builder_info(head: bytes) -> bool:
    """A builder cache ``dataset_info.json`` (it names its builder and its splits)."""
    return head.lstrip().startswith(b"{") and b'"builder_name"' in head
