"""``hub verify``: a Hugging Face hub cache laid out by huggingface_hub's own helpers
(``fixtures/hub_cache.py``), checked offline; ``huggingface_hub.scan_cache_dir()`` is the oracle
of what the cache holds (repositories, revisions, refs, files) and of which repositories it
calls corrupted. The kit goes further: it hashes every blob against its name and ties each
problem to the revision it breaks. Evidence is hashed before and after."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from cli_helpers import invoke

from ckptrescue.datasets.hub_cache import verify_cache
from ckptrescue.record.case import Case
from fixtures import hub_cache as hc
from fixtures.det import det_bytes

pytest.importorskip("huggingface_hub")


def tree_state(root: Path) -> dict[str, str]:
    """Every entry under root: a link's target, a file's SHA-256 (evidence unchanged)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + dirnames:
            p = Path(dirpath) / name
            if p.is_symlink():
                out[str(p)] = "-> " + os.readlink(p)
            elif p.is_file():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def oracle(root: Path) -> tuple[dict, set[str]]:
    """What scan_cache_dir() says: {(type, repo_id): {commit: (refs, files)}} and the repo
    folders it reports as corrupted."""
    from huggingface_hub import scan_cache_dir

    info = scan_cache_dir(root)
    repos = {(r.repo_type, r.repo_id): {rev.commit_hash: (sorted(rev.refs), sorted(
        str(f.file_path.relative_to(rev.snapshot_path)) for f in rev.files))
        for rev in r.revisions} for r in info.repos}
    corrupted = {str(w) for w in info.warnings}
    return repos, corrupted


def ours(result) -> dict:
    out = {}
    for repo in result.repos:
        revs = {}
        for rev in repo.revisions:
            files = sorted(
                p.relative_to(Path(result.root) / repo.folder / "snapshots" / rev).as_posix()
                for p in (Path(result.root) / repo.folder / "snapshots" / rev).rglob("*")
                if p.is_symlink() or p.is_file())
            revs[rev] = (repo.names_of(rev), files)
        out[(repo.repo_type, repo.repo_id)] = revs
    return out


@pytest.fixture
def cache(tmp_path: Path) -> tuple[Path, dict]:
    root = tmp_path / "hub"
    return root, hc.build(root)


def test_intact_cache_agrees_with_scan_cache_dir(cache) -> None:
    root, _written = cache
    before = tree_state(root)
    result = verify_cache(root)
    assert result.ok, [f.title for f in result.findings()]
    theirs, corrupted = oracle(root)
    assert corrupted == set()
    assert ours(result) == theirs
    c = result.counts()
    assert c["blobs"] == c["blobs_ok"] == 6 and c["revisions"] == 3 and c["links_ok"] == 7
    assert result.bytes_hashed == sum(p.stat().st_size for p in root.rglob("blobs/*"))
    assert tree_state(root) == before


def test_damage_is_tied_to_the_revisions_it_breaks(cache) -> None:
    root, w = cache
    # bit rot in the shared config.json blob (git blob hash): breaks main and v1
    blob = w["config"]["blob"]
    data = bytearray(blob.read_bytes())
    data[3] ^= 0x01
    blob.write_bytes(bytes(data))
    # the dataset's parquet blob deleted: a dangling link
    w["shard"]["blob"].unlink()
    # an interrupted download of a new weights file (no link yet), as huggingface_hub leaves it
    part = hc.interrupted_download(root, hc.MODEL, "model", det_bytes(50_000, "next"), 20_000)
    before = tree_state(root)
    result = verify_cache(root)
    assert not result.ok
    model = next(r for r in result.repos if r.repo_id == hc.MODEL)
    data_repo = next(r for r in result.repos if r.repo_id == hc.DATASET)
    assert set(model.broken_revisions()) == {hc.COMMIT_MAIN, hc.COMMIT_V1}
    assert data_repo.broken_revisions() == {hc.COMMIT_DATA: [
        f"data/train-00000-of-00001.parquet: dangling (blob {w['shard']['etag']} is missing)"]}
    bad = next(b for b in model.blobs if b.name == w["config"]["etag"])
    assert bad.status == "mismatch" and bad.kind == "git-sha1"
    assert bad.actual == hc.git_blob_hash(bytes(data))
    inc = next(b for b in model.blobs if b.status == "incomplete")
    assert inc.name == part.name and inc.size == 20_000
    codes = {f.code for f in result.findings()}
    assert {"HB001", "HB002", "HB003"} <= codes
    hb001 = next(f for f in result.findings() if f.code == "HB001")
    assert "(main)" in hb001.title and "(v1)" in hb001.title
    # the oracle: scan_cache_dir calls the dataset repo corrupted (its broken symlink); the
    # damaged config blob it cannot see (it never hashes)
    _theirs, corrupted = oracle(root)
    assert any("Blob missing" in c and str(w["shard"]["blob"]) in c for c in corrupted)
    assert not any(hc.MODEL.split("/")[1] in c for c in corrupted)
    assert tree_state(root) == before


def test_hostile_entries_are_findings(cache) -> None:
    root, w = cache
    snap = w["weights"]["pointer"].parent
    os.symlink("/etc/hostname", snap / "escape.bin")  # leaves the repository
    os.symlink(snap / "loop", snap / "loop")  # a loop
    os.symlink("../../blobs/" + "0" * 64, snap / "ctl\x1b[31mred\n.bin")  # dangling, hostile name
    os.mkfifo(w["weights"]["storage"] / "blobs" / ("1" * 64))  # a FIFO named like a blob
    (w["weights"]["storage"] / "blobs" / "README").write_text("not a blob")
    (root / "stray.txt").write_text("x")
    result = verify_cache(root)
    model = next(r for r in result.repos if r.repo_id == hc.MODEL)
    statuses = {x.path: x.status for x in model.links}
    assert statuses["escape.bin"] == "outside"
    assert statuses["loop"] == "outside"  # resolves to the snapshot itself, not blobs/
    assert statuses["ctl\x1b[31mred\n.bin"] == "dangling"
    fifo = next(b for b in model.blobs if b.name == "1" * 64)
    assert fifo.status == "not-regular"
    readme = next(b for b in model.blobs if b.name == "README")
    assert readme.status == "unrecognized"
    assert any("stray.txt" in p for p in result.problems)
    res = invoke("hub", "verify", str(root))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "\x1b" not in res.stdout, "a hostile name is shown, never obeyed"


def test_cli_case_playbook_and_report(cache, tmp_path: Path) -> None:
    root, w = cache
    w["weights_v1"]["blob"].unlink()
    res = invoke("hub", "verify", str(root), "--json")
    assert res.returncode == 1, res.stderr
    data = json.loads(res.stdout)
    assert data["counts"]["broken_revisions"] == 1
    model = next(r for r in data["repos"] if r["repo_id"] == hc.MODEL)
    assert list(model["broken_revisions"]) == [hc.COMMIT_V1]
    missing = invoke("hub", "verify", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "cannot read the cache" in missing.stderr
    case_dir = tmp_path / "case"
    run = invoke("playbook", "run", "hub-cache", "--case", str(case_dir), "--yes", "--json",
                 "-p", f"cache={root}")
    assert run.returncode in (0, 1), run.stderr
    answer = json.loads(run.stdout)["answer"]
    assert f"1 revision(s) broken: {hc.MODEL}@{hc.COMMIT_V1[:10]}" in answer
    case = Case.open(case_dir)
    assert "HB002" in {f.code for f in case.findings()}
    md = invoke("report", str(case_dir), "--format", "md", "-o", str(tmp_path / "r.md"))
    assert md.returncode == 0, md.stderr
    text = (tmp_path / "r.md").read_text()
    assert "## Hugging Face hub cache" in text and hc.COMMIT_V1 in text
