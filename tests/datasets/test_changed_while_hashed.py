"""A file rewritten while ``manifest build`` hashes it: the size/mtime/inode before and after the
read differ, so it is reported and hashed again from a stable state, and the manifest holds the
hash of what the file now is (a later audit agrees), not of a mix of old and new bytes."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from ckptrescue.datasets.hashing import hash_file
from ckptrescue.datasets.manifest import build_manifest


def _sha(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def test_hash_file_rehashes_a_file_written_during_the_read(tmp_path: Path) -> None:
    path = tmp_path / "shard.bin"
    path.write_bytes(bytes(range(256)) * 16384)  # 4 MiB, read in 1 MiB blocks
    state = {"writes": 0}

    def write_once(_n: int) -> None:
        if state["writes"] == 0:
            state["writes"] = 1
            with open(path, "r+b") as fh:  # a real writer changes the tail mid-read
                fh.seek(3 << 20)
                fh.write(b"\xff" * 4096)
                fh.flush()
                os.fsync(fh.fileno())

    outcome = hash_file(str(path), on_bytes=write_once)
    assert outcome.changed == 1
    assert outcome.sha256 == _sha(path)  # the file as it is now, hashed whole
    assert outcome.mtime_ns == os.stat(path).st_mtime_ns


def test_hash_file_sees_a_rename_over_the_path(tmp_path: Path) -> None:
    path = tmp_path / "a.bin"
    path.write_bytes(b"a" * (3 << 20))
    state = {"done": False}

    def replace_once(_n: int) -> None:
        if not state["done"]:
            state["done"] = True
            new = tmp_path / "a.bin.new"
            new.write_bytes(b"b" * (3 << 20))  # same size: only the inode tells
            os.replace(new, path)

    outcome = hash_file(str(path), on_bytes=replace_once)
    assert outcome.changed == 1 and outcome.sha256 == hashlib.sha256(b"b" * (3 << 20)).hexdigest()


def test_hash_file_gives_up_on_a_file_that_never_holds_still(tmp_path: Path) -> None:
    path = tmp_path / "busy.bin"
    path.write_bytes(b"x" * (2 << 20))

    turn = {"n": 0}

    def always(_n: int) -> None:  # a writer that rewrites the first byte during every read
        turn["n"] += 1
        with open(path, "r+b") as fh:
            fh.write(bytes([turn["n"] % 256]))

    outcome = hash_file(str(path), on_bytes=always)
    assert outcome.sha256 is None and "changed while it was hashed" in (outcome.error or "")


def test_manifest_build_reports_and_rehashes_a_file_rewritten_while_hashed(
        tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    (root / "small.txt").write_bytes(b"steady\n")
    big = root / "big.bin"
    with open(big, "wb") as fh:
        fh.truncate(32 << 20)  # sparse, 32 blocks of 1 MiB
    state = {"writes": 0}

    def progress(*_args: Any, **_kw: Any) -> None:  # the first call: after the first block
        if state["writes"] == 0:
            state["writes"] = 1
            with open(big, "r+b") as fh:  # rewrite a block near the end, mid-read
                fh.seek((32 << 20) - (1 << 20))
                fh.write(b"\x01" * 4096)
                fh.flush()
    out = tmp_path / "SHA256SUMS"
    result = build_manifest(root, out, jobs=1, progress=progress)
    assert state["writes"] == 1
    assert [(rel, n) for rel, n in result.changed] == [(b"big.bin", 1)]
    assert any(f.code == "MF008" and "big.bin" in f.title for f in result.findings())
    lines = dict(reversed(line.split("  ", 1)) for line in out.read_text().splitlines())
    assert lines["big.bin"] == _sha(big)
    from cli_helpers import invoke

    audit = invoke("manifest", "audit", str(root), str(out), "--json")
    assert audit.returncode == 0, audit.stdout + audit.stderr
