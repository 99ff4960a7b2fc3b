"""The sha256sum line format, and interop with the real GNU sha256sum in both directions."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckptrescue.datasets import sha256sum_format as fmt
from ckptrescue.datasets.audit import audit
from ckptrescue.datasets.manifest import build_manifest
from fixtures.det import det_bytes

ODD_NAMES = [b"plain.txt", b"with space.bin", b"new\nline", b"back\\slash", b"cr\rname",
             b"not-utf8-\xff\xfe.bin", b"both\\and\nnewline", b"tab\there"]


@given(st.binary(min_size=1, max_size=40).filter(lambda b: b"\0" not in b and b"/" not in b))
def test_format_then_parse_gives_the_name_back(name: bytes) -> None:
    digest = "ab" * 32
    line = fmt.format_line(digest, name)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    [parsed] = list(fmt.parse_manifest(line))
    assert parsed.name == name and parsed.sha256 == digest


def test_escaping_matches_coreutils_rules() -> None:
    digest = "00" * 32
    assert fmt.format_line(digest, b"a b") == digest.encode() + b"  a b\n"
    assert fmt.format_line(digest, b"a\\b") == b"\\" + digest.encode() + b"  a\\\\b\n"
    assert fmt.format_line(digest, b"a\nb") == b"\\" + digest.encode() + b"  a\\nb\n"
    assert fmt.format_line(digest, b"a\rb") == b"\\" + digest.encode() + b"  a\\rb\n"
    assert fmt.format_line(digest, b"\xff") == digest.encode() + b"  \xff\n"


def test_bad_lines_name_the_line() -> None:
    with pytest.raises(fmt.ManifestSyntaxError, match="line 2"):
        list(fmt.parse_manifest(b"%s  ok\nnot a hash  x\n" % (b"0" * 64)))


def _odd_tree(root: Path) -> None:
    root.mkdir()
    (root / "sub").mkdir()
    for i, name in enumerate(ODD_NAMES):
        with open(os.path.join(os.fsencode(root), b"sub", name), "wb") as fh:
            fh.write(det_bytes(100 + i, 1, i))


@pytest.mark.needs_tool("sha256sum")
def test_real_sha256sum_checks_our_manifest(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    _odd_tree(root)
    out = tmp_path / "ds.sha256"
    result = build_manifest(root, out, jobs=2)
    assert len(result.entries) == len(ODD_NAMES)
    proc = subprocess.run(["sha256sum", "--strict", "-c", str(out)], cwd=root,
                          capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(b": OK\n") == len(ODD_NAMES)


@pytest.mark.needs_tool("sha256sum")
def test_our_manifest_is_byte_identical_to_sha256sum_output(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    _odd_tree(root)
    names = sorted(b"sub/" + n for n in ODD_NAMES)
    theirs = subprocess.run(["sha256sum", "--", *[os.fsdecode(n) for n in names]], cwd=root,
                            capture_output=True, check=True, timeout=60).stdout
    out = tmp_path / "ours.sha256"
    build_manifest(root, out, jobs=1)
    assert out.read_bytes() == theirs


@pytest.mark.needs_tool("sha256sum")
def test_audit_reads_a_manifest_written_by_sha256sum(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    _odd_tree(root)
    theirs = tmp_path / "theirs.sha256"
    names = [os.fsdecode(b"./sub/" + n) for n in ODD_NAMES]
    theirs.write_bytes(subprocess.run(["sha256sum", "--", *names], cwd=root,
                                      capture_output=True, check=True, timeout=60).stdout)
    victim = os.path.join(os.fsencode(root), b"sub", b"new\nline")
    with open(victim, "r+b") as fh:
        fh.write(b"X")
    result = audit(root, theirs)
    bad = {r.rel: r.status for r in result.files if r.status != "ok"}
    assert bad == {b"sub/new\nline": "corrupted"}
    assert any("sizes unknown" in n for n in result.notes)
    assert shutil.which("sha256sum")
