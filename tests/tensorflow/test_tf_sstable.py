"""The TF-free ``.index`` parser: SSTable blocks, CRCs, entries, recovery (real TF indexes)."""

from __future__ import annotations

import os
from pathlib import Path

from ckptrescue.checkpoints.formats import protowire, sstable
from ckptrescue.checkpoints.formats.tensorbundle_entries import decode_entry, decode_slice_key
from ckptrescue.checkpoints.formats.tensorbundle_index import read_index
from fixtures import tensorflow as tfx


def test_varint_roundtrip_and_errors() -> None:
    for v in (0, 1, 127, 128, 300, 2**32, 2**63 + 5):
        enc = protowire.encode_varint(v)
        assert protowire.read_varint(enc, 0) == (v, len(enc))
    try:
        protowire.read_varint(b"\x80\x80", 0)
    except protowire.WireError as exc:
        assert "past the end" in str(exc)
    else:
        raise AssertionError("truncated varint accepted")


def test_mask_matches_leveldb_definition() -> None:
    for crc in (0, 1, 0xDEADBEEF, 0xFFFFFFFF):
        assert sstable.unmask(sstable.mask(crc)) == crc
    # LevelDB's own example: Mask(0) = 0xa282ead8.
    assert sstable.mask(0) == 0xA282EAD8


def test_intact_index_parses_every_entry(tf_originals: Path) -> None:
    scan = sstable.read_table(tf_originals / "run" / "ckpt-1.index")
    assert scan.intact and scan.footer_ok and not scan.recovered_by_scan
    keys = [e.key for e in scan.entries]
    assert keys[0] == b"" and keys == sorted(keys)  # header first, keys in SSTable order
    names = set(tfx.reads(tf_originals, "ckpt-1"))
    assert {k.decode() for k in keys[1:]} == names


def test_slice_keys_decode_to_the_parents_slices(tf_originals: Path) -> None:
    index = read_index(tf_originals / "sharded" / "ckpt")
    parents = {e.key: e for e in index.entries if e.is_sliced_parent}
    slices = [e for e in index.entries if e.is_slice]
    assert parents and slices
    for parent in parents.values():
        mine = {s.slice.text() for s in slices if s.parent == parent.key}
        assert mine == {sl.text() for sl in parent.slices}, parent.key
    assert index.header is not None and index.header.num_shards > 1


def test_slice_key_rejects_plain_key() -> None:
    try:
        decode_slice_key(b"plain")
    except protowire.WireError:
        pass
    else:
        raise AssertionError("plain key decoded as a slice key")


def test_flipped_index_block_keeps_entries_untrusted(copy_of) -> None:
    d = copy_of("many")
    tfx.flip(d / "ckpt.index", 5000, 0x04)
    scan = sstable.read_table(d / "ckpt.index")
    kinds = [p.kind for p in scan.problems]
    assert kinds == ["block-checksum"]
    assert len(scan.entries) >= 300 and not any(e.trusted for e in scan.entries)


def test_truncated_index_recovers_complete_blocks_by_scan(copy_of) -> None:
    d = copy_of("many")
    size = (d / "ckpt.index").stat().st_size
    os.truncate(d / "ckpt.index", size - 60)  # footer and most of the index block gone
    scan = sstable.read_table(d / "ckpt.index")
    assert scan.recovered_by_scan and not scan.footer_ok
    assert scan.problems[0].kind == "bad-magic"
    trusted = [e for e in scan.entries if e.trusted]
    assert len(trusted) == 302  # header + object graph + 300 variables, all CRC-verified
    for e in trusted[1:]:
        if not e.key.startswith(b"\x00"):
            decode_entry(e.key.decode(), e.value)


def test_tiny_file_is_not_an_sstable(tmp_path: Path) -> None:
    p = tmp_path / "x.index"
    p.write_bytes(b"not an index")
    assert not sstable.is_sstable(p)
    scan = sstable.read_table(p)
    assert scan.problems[0].kind == "truncated" and scan.entries == []


def _blocks(index: Path) -> list[int]:
    return sorted({e.block_offset for e in sstable.read_table(index).entries})


def test_two_block_index_damage_stays_in_its_block(copy_of) -> None:
    d = copy_of("wide")
    first, second = _blocks(d / "ckpt.index")
    assert first == 0 and second > 200_000  # TF's 256 KiB block size
    tfx.flip(d / "ckpt.index", second + 5000, 0x20)
    scan = sstable.read_table(d / "ckpt.index")
    assert [(p.kind, p.offset) for p in scan.problems] == [("block-checksum", second)]
    trusted = {e.block_offset for e in scan.entries if e.trusted}
    untrusted = {e.block_offset for e in scan.entries if not e.trusted}
    assert trusted == {first} and untrusted == {second}


def test_damaged_index_block_handles_still_lead_to_verified_blocks(copy_of) -> None:
    d = copy_of("wide")
    index = d / "ckpt.index"
    footer = index.read_bytes()[-48:]
    _, pos = protowire.read_varint(footer, 0)
    _, pos = protowire.read_varint(footer, pos)
    index_block, _ = protowire.read_varint(footer, pos)
    tfx.flip(index, index_block + 4, 0x01)  # a separator key byte of the index block
    scan = sstable.read_table(index)
    assert [(p.kind, p.offset) for p in scan.problems] == [("block-checksum", index_block)]
    assert len(scan.entries) == 6002 and all(e.trusted for e in scan.entries)


def test_index_cut_inside_its_index_block_recovers_both_data_blocks(copy_of) -> None:
    d = copy_of("wide")
    index = d / "ckpt.index"
    os.truncate(index, index.stat().st_size - 70)
    scan = sstable.read_table(index)
    assert scan.recovered_by_scan
    assert sum(e.trusted for e in scan.entries) == 6002
