"""manifest audit's on-disk state: resumes after SIGKILL and Ctrl-C without re-reading finished
files, re-reads files changed since their row, never reuses a completed audit as a result, never
lives inside DIR, lists only damaged rows above the size threshold.

The evidence (DIR) is digested before and after every audit and must be unchanged; where a test
damages a file itself, it does so between audits. File contents come from integer patterns.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import EXE, invoke

from ckptrescue.datasets import audit as audit_mod
from ckptrescue.datasets.audit import audit, random_positions
from ckptrescue.datasets.audit_state import describe
from ckptrescue.datasets.manifest import build_manifest
from ckptrescue.datasets.progress import Progress
from ckptrescue.datasets.sampling import draw, sample_size
from ckptrescue.errors import UsageError
from fixtures.datasets import flip_byte, tree_digest

MiB = 1 << 20


def _content(i: int, size: int) -> bytes:
    """``size`` bytes, different for every ``i`` (an integer pattern, no randomness)."""
    word = (i * 0x9E3779B97F4A7C15 & (2**64 - 1)).to_bytes(8, "little")
    return (word * (size // 8 + 1))[:size]


def _make_tree(root: Path, n: int, size: int) -> None:
    for i in range(n):
        d = root / f"d{i % 5}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:04d}.bin").write_bytes(_content(i, size + i))


@pytest.fixture
def big_tree(tmp_path: Path) -> tuple[Path, Path]:
    """300 files of about 1 MiB and their manifest: slow enough at --jobs 1 to stop mid-way."""
    root = tmp_path / "ds"
    _make_tree(root, 300, MiB)
    manifest = tmp_path / "ds.sha256"
    build_manifest(root, manifest, jobs=2)
    return root, manifest


@pytest.fixture
def small_tree(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "ds"
    _make_tree(root, 40, 4096)
    manifest = tmp_path / "ds.sha256"
    build_manifest(root, manifest, jobs=2)
    return root, manifest


def _audit_checked(root: Path, *args: object, **kw: object) -> audit_mod.AuditResult:
    """The library audit, with the evidence digested before and after."""
    before = tree_digest(root)
    result = audit(root, *args, **kw)  # type: ignore[arg-type]
    assert tree_digest(root) == before, "the audit changed the dataset"
    return result


def _cli_checked(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    before = tree_digest(root)
    proc = subprocess.run([EXE, "manifest", "audit", str(root), *args], capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=300, check=False)
    assert tree_digest(root) == before, "the audit changed the dataset"
    return proc


def _hashed_rows(state: Path) -> int:
    """Rows committed in the state (a reader beside the writer: WAL)."""
    try:
        conn = sqlite3.connect(f"file:{state}?mode=ro", uri=True, timeout=0.1)
    except sqlite3.Error:
        return 0
    try:
        return int(conn.execute("SELECT count(*) FROM hashed").fetchone()[0])
    except sqlite3.Error:
        return 0  # not created yet
    finally:
        conn.close()


def _interrupt_cli(root: Path, manifest: Path, state: Path, sig: int
                   ) -> tuple[subprocess.CompletedProcess[str], int]:
    """Start a real `ckptrescue manifest audit --jobs 1`, wait until the state holds committed
    rows, send ``sig``; (the finished process, rows committed when it ended)."""
    before = tree_digest(root)
    proc = subprocess.Popen([EXE, "manifest", "audit", str(root), str(manifest), "--jobs", "1",
                             "--json", "--no-progress", "--state", str(state)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while _hashed_rows(state) == 0:
        assert proc.poll() is None, f"the audit ended before any row was committed: " \
                                    f"{proc.communicate()}"
        assert time.monotonic() < deadline, "no row committed in 120 s"
        time.sleep(0.002)  # polling the observable, not waiting for it
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert tree_digest(root) == before, "the audit changed the dataset"
    committed = describe(state)["hashed"]
    assert describe(state)["meta"]["status"] == "running"
    assert 0 < committed < 300, f"{committed} rows: not stopped mid-way"
    return done, committed


def _finished(state: Path) -> list[str]:
    conn = sqlite3.connect(f"file:{state}?mode=ro", uri=True)
    try:
        return [bytes(r[0]).decode() for r in conn.execute("SELECT rel FROM hashed ORDER BY rel")]
    finally:
        conn.close()


def _unfinished(root: Path, state: Path) -> list[str]:
    done = set(_finished(state))
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.bin")
                  if str(p.relative_to(root)) not in done)


def _rewrite_same_size(path: Path) -> None:
    """New content of the same size, written as a new version (the mtime moves on)."""
    data = path.read_bytes()
    time.sleep(0.01)  # a distinct mtime even on coarse clocks
    path.write_bytes(bytes(b ^ 0x5A for b in data))


def _comparable(data: dict[str, object]) -> dict[str, object]:
    return {k: data[k] for k in ("files", "counts", "answer")}


def test_sigkill_mid_audit_resumes_without_rehashing_finished_files(big_tree, tmp_path) -> None:
    root, manifest = big_tree
    state = tmp_path / "state.sqlite"
    killed, committed = _interrupt_cli(root, manifest, state, signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL
    finished = _finished(state)
    # one finished file changes after its row was written (new version, same size): its row no
    # longer counts, it is hashed again and reported; one unfinished file is bit-rotted
    changed = root / finished[0]
    _rewrite_same_size(changed)
    rotted = root / _unfinished(root, state)[0]
    flip_byte(rotted, 1000)

    resumed = _cli_checked(root, str(manifest), "--jobs", "1", "--json", "--no-progress",
                           "--state", str(state))
    assert resumed.returncode == 1, resumed.stderr
    data = json.loads(resumed.stdout)
    assert data["resumed"] == committed - 1  # every finished file but the changed one
    assert data["state"] == str(state)
    bad = {r["path"]: r["status"] for r in data["files"] if r["status"] != "ok"}
    assert bad == {finished[0]: "corrupted", str(rotted.relative_to(root)): "corrupted"}
    assert describe(state)["meta"]["status"] == "complete"

    # the same as an audit that was never interrupted
    fresh = _audit_checked(root, manifest, state=tmp_path / "other.sqlite")
    assert fresh.resumed == 0
    assert _comparable(data) == _comparable(json.loads(json.dumps(fresh.to_json())))


def test_ctrl_c_keeps_finished_rows_and_the_rerun_trusts_them(big_tree, tmp_path) -> None:
    root, manifest = big_tree
    state = tmp_path / "state.sqlite"
    stopped, committed = _interrupt_cli(root, manifest, state, signal.SIGINT)
    assert stopped.returncode == 130
    assert "Traceback" not in stopped.stderr
    assert f"finished files are kept in {state}: run the same command again to resume" \
        in stopped.stderr
    # bit rot in a finished file (size, mtime and inode kept): the resumed audit takes that
    # file's hash from the state, so it still says ok: proof the file was not read again ...
    victim = _finished(state)[3]
    flip_byte(root / victim, 4096)
    resumed = _cli_checked(root, str(manifest), "--jobs", "1", "--no-progress", "--state",
                           str(state))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"resumed {committed:,} files from {state}" in resumed.stdout
    # ... and a new audit (the state is complete now) reads everything again and finds it
    again = _cli_checked(root, str(manifest), "--jobs", "1", "--json", "--no-progress",
                         "--state", str(state))
    data = json.loads(again.stdout)
    assert again.returncode == 1
    assert data["resumed"] == 0
    assert {r["path"]: r["status"] for r in data["files"] if r["status"] != "ok"} == {
        victim: "corrupted"}


def _stop_after(n: int) -> tuple[threading.Event, object]:
    """A cancel event set by the progress callback once ``n`` files are done (what Ctrl-C does
    to the library call)."""
    cancel = threading.Event()

    def progress(p: Progress) -> None:
        if p.files_done >= n:
            cancel.set()

    return cancel, progress


def _interrupted(root: Path, manifest: Path, state: Path, n: int, **kw: object) -> int:
    cancel, progress = _stop_after(n)
    before = tree_digest(root)
    with pytest.raises(KeyboardInterrupt):
        audit(root, manifest, jobs=1, state=state, cancel=cancel, progress=progress,  # type: ignore[arg-type]
              **kw)  # type: ignore[arg-type]
    assert tree_digest(root) == before
    return int(describe(state)["hashed"])


@pytest.fixture
def slow_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """The progress callback fires on every count (not every 0.25 s), so a stop lands early."""
    from ckptrescue.datasets import progress

    original = progress.Tracker.__init__

    def init(self: progress.Tracker, *a: object, **kw: object) -> None:
        original(self, *a, **kw)  # type: ignore[arg-type]
        self.interval_s = 0.0

    monkeypatch.setattr(progress.Tracker, "__init__", init)


def test_a_completed_state_is_never_reused_as_a_result(small_tree, tmp_path) -> None:
    root, manifest = small_tree
    first = _audit_checked(root, manifest)
    assert first.ok and first.state == str(Path(str(manifest) + ".audit.sqlite"))
    assert describe(first.state)["meta"]["status"] == "complete"
    victim = root / "d1" / "f0006.bin"
    flip_byte(victim, 17)  # size, mtime and inode unchanged
    second = _audit_checked(root, manifest)
    assert second.resumed == 0
    assert {r.rel.decode(): r.status for r in second.files if r.status != "ok"} == {
        "d1/f0006.bin": "corrupted"}


def test_changed_since_its_row_is_hashed_again(small_tree, tmp_path, slow_progress) -> None:
    root, manifest = small_tree
    state = tmp_path / "st.sqlite"
    committed = _interrupted(root, manifest, state, 10)
    assert 0 < committed < 40
    done = _finished(state)
    touched = root / done[0]
    _rewrite_same_size(touched)
    moved = root / done[1]  # replaced: same size and mtime, a new inode
    st = moved.stat()
    other = moved.with_name("replacement.tmp")  # created while the old inode still exists
    other.write_bytes(_content(999, st.st_size))
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, moved)
    assert moved.stat().st_ino != st.st_ino and moved.stat().st_mtime_ns == st.st_mtime_ns
    result = _audit_checked(root, manifest, jobs=1, state=state)
    assert result.resumed == committed - 2
    assert {r.rel.decode(): r.status for r in result.files if r.status != "ok"} == {
        done[0]: "corrupted", done[1]: "corrupted"}


def test_an_unfinished_state_of_another_audit_is_not_discarded(small_tree, tmp_path,
                                                               slow_progress) -> None:
    root, manifest = small_tree
    state = tmp_path / "st.sqlite"
    committed = _interrupted(root, manifest, state, 5)
    with pytest.raises(UsageError, match="holds an unfinished audit") as err:
        audit(root, manifest, quick=True, state=state)
    assert "--restart" in (err.value.hint or "")
    assert describe(state)["hashed"] == committed
    quick = _audit_checked(root, manifest, quick=True, state=state, restart=True)
    assert quick.ok and quick.resumed == 0


def test_restart_ignores_an_unfinished_state(small_tree, tmp_path, slow_progress) -> None:
    root, manifest = small_tree
    state = tmp_path / "st.sqlite"
    assert _interrupted(root, manifest, state, 5) > 0
    result = _audit_checked(root, manifest, state=state, restart=True)
    assert result.resumed == 0 and result.ok


def test_sampled_audit_resumes_the_same_draw(tmp_path, slow_progress) -> None:
    root = tmp_path / "ds"
    _make_tree(root, 120, 2048)
    manifest = tmp_path / "ds.sha256"
    build_manifest(root, manifest, jobs=2)
    state = tmp_path / "st.sqlite"
    committed = _interrupted(root, manifest, state, 6, sample="25%", seed=9)
    resumed = _audit_checked(root, manifest, sample="25%", seed=9, state=state, jobs=1)
    uninterrupted = _audit_checked(root, manifest, sample="25%", seed=9,
                                   state=tmp_path / "b.sqlite")
    assert resumed.resumed == committed
    assert resumed.to_json()["files"] == uninterrupted.to_json()["files"]
    assert resumed.sample == uninterrupted.sample
    # the draw is sampling.draw over the names in order, as before the state store
    names = sorted(str(p.relative_to(root)) for p in root.rglob("*.bin"))
    want = set(draw(names, sample_size(len(names), "25%"), 9))
    assert {r.rel.decode() for r in resumed.files if r.actual is not None} == want


@pytest.mark.parametrize(("n", "k"), [(10, 3), (30, 20), (1000, 7), (5000, 400), (50, 50)])
def test_draw_by_position_is_the_draw_by_name(n: int, k: int) -> None:
    names = [f"name-{i:05d}" for i in range(n)]
    for seed in (0, 1, 12345):
        assert [names[i] for i in random_positions(n, k, seed)] == draw(names, k, seed)


def test_state_inside_dir_is_refused(small_tree, tmp_path) -> None:
    root, manifest = small_tree
    before = tree_digest(root)
    proc = invoke("manifest", "audit", str(root), str(manifest), "--state",
                  str(root / "d0" / "audit.sqlite"))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "inside DIR" in lines[0] and lines[0].startswith("ckptrescue: error:")
    assert not (root / "d0" / "audit.sqlite").exists()
    assert tree_digest(root) == before


def test_default_state_beside_a_manifest_inside_dir_is_refused(small_tree, tmp_path) -> None:
    root, manifest = small_tree
    inside = root / "ds.sha256"
    inside.write_bytes(manifest.read_bytes())  # the manifest is excluded from the walk
    before = tree_digest(root)
    proc = invoke("manifest", "audit", str(root), str(inside))
    assert proc.returncode == 2
    assert "--state" in proc.stderr and "Traceback" not in proc.stderr
    assert tree_digest(root) == before
    elsewhere = invoke("manifest", "audit", str(root), str(inside), "--state",
                       str(tmp_path / "st.sqlite"), "--json")
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert tree_digest(root) == before


@pytest.fixture
def readonly_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory on a read-only bind mount of itself (root cannot write there either)."""
    d = tmp_path / "ro"
    d.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(d), str(d)], capture_output=True,
                             check=False, timeout=60).returncode == 0
    if not mounted:
        pytest.skip("cannot bind-mount here")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(d)], check=True, timeout=60,
                       capture_output=True)
        yield d
    finally:
        subprocess.run(["umount", str(d)], check=False, timeout=60)


def test_unwritable_default_location_is_a_clear_error(small_tree, tmp_path,
                                                     readonly_dir: Path) -> None:
    root, manifest = small_tree
    # the manifest is in a read-only directory: copy it there before the remount
    subprocess.run(["mount", "-o", "remount,rw,bind", str(readonly_dir)], check=True, timeout=60)
    ro_manifest = readonly_dir / "ds.sha256"
    ro_manifest.write_bytes(manifest.read_bytes())
    Path(str(ro_manifest) + ".jsonl").write_bytes(Path(str(manifest) + ".jsonl").read_bytes())
    subprocess.run(["mount", "-o", "remount,ro,bind", str(readonly_dir)], check=True, timeout=60)
    proc = invoke("manifest", "audit", str(root), str(ro_manifest))
    assert proc.returncode == 2
    assert "cannot write the audit state" in proc.stderr and "--state" in proc.stderr
    assert "Traceback" not in proc.stderr
    ok = invoke("manifest", "audit", str(root), str(ro_manifest), "--state",
                str(tmp_path / "st.sqlite"))
    assert ok.returncode == 0, ok.stderr


def test_a_file_that_is_not_a_state_is_never_overwritten(small_tree, tmp_path) -> None:
    root, manifest = small_tree
    precious = tmp_path / "notes.txt"
    precious.write_bytes(b"not a database\n" * 100)
    with pytest.raises(UsageError, match="refusing to overwrite"):
        audit(root, manifest, state=precious)
    assert precious.read_bytes() == b"not a database\n" * 100


def test_above_the_threshold_only_damaged_rows_are_listed(small_tree, tmp_path,
                                                          monkeypatch) -> None:
    root, manifest = small_tree
    flip_byte(root / "d2" / "f0002.bin", 5)
    (root / "d3" / "f0003.bin").unlink()
    (root / "d4" / "extra.bin").write_bytes(_content(77, 300))
    full = _audit_checked(root, manifest, state=tmp_path / "a.sqlite")
    assert len(full.files) == 41 and full.files_omitted == 0
    monkeypatch.setattr(audit_mod, "LIST_ALL_MAX", 10)
    big = _audit_checked(root, manifest, state=tmp_path / "b.sqlite")
    data = big.to_json()
    assert data["counts"] == full.counts == {"ok": 38, "corrupted": 1, "changed": 0,
                                             "missing": 1, "new": 1, "unreadable": 0}
    assert data["files_omitted"] == 38
    assert [r["path"] for r in data["files"]] == ["d2/f0002.bin", "d3/f0003.bin",
                                                  "d4/extra.bin"]
    assert data["files"] == [r for r in full.to_json()["files"] if r["status"] != "ok"]
    assert not big.ok
    assert sorted(f.code for f in big.findings()) == ["MF001", "MF003", "MF004"]
    # the command: JSON as documented, and the human listing with its reasons
    proc = invoke("manifest", "audit", str(root), str(manifest), "--state",
                  str(tmp_path / "c.sqlite"), "--json")
    out = json.loads(proc.stdout)
    assert proc.returncode == 1
    assert out["files_omitted"] == 38 and len(out["files"]) == 3
    human = invoke("manifest", "audit", str(root), str(manifest), "--state",
                   str(tmp_path / "c.sqlite"))
    assert "CORRUPTED   d2/f0002.bin  (same size, different SHA-256)" in human.stdout
    assert "38 ok files not listed" in human.stdout


def test_sidecar_import_keeps_odd_names(tmp_path) -> None:
    """Names the sidecar escapes (not UTF-8, non-ASCII, backslash, quote, newline) get their
    sizes and mtimes too: a quick audit sees them all ok, then sees the one whose mtime moved."""
    root = tmp_path / "ds"
    root.mkdir()
    names = [b"plain.bin", b"caf\xc3\xa9.bin", b"raw\xff\xfe.bin", b"back\\slash.bin",
             b'quote".bin', b"new\nline.bin", b"./dot.bin"[2:]]
    for i, name in enumerate(names):
        with open(os.path.join(os.fsencode(root), name), "wb") as fh:
            fh.write(_content(i, 100 + i))
    manifest = tmp_path / "odd.sha256"
    build_manifest(root, manifest, jobs=1)
    quick = _audit_checked(root, manifest, quick=True, state=tmp_path / "q.sqlite")
    assert quick.ok and quick.counts["ok"] == len(names)
    victim = os.path.join(os.fsencode(root), b"raw\xff\xfe.bin")
    st = os.stat(victim)
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    again = _audit_checked(root, manifest, quick=True, state=tmp_path / "q.sqlite")
    assert {r.rel: r.reason for r in again.files if r.status != "ok"} == {
        b"raw\xff\xfe.bin": "same size, mtime differs"}


def test_a_state_left_by_a_failed_import_does_not_block_the_fixed_manifest(small_tree,
                                                                           tmp_path) -> None:
    root, manifest = small_tree
    good = manifest.read_bytes()
    manifest.write_bytes(good + b"not a manifest line\n")
    with pytest.raises(UsageError, match="not a sha256sum manifest"):
        audit(root, manifest)
    manifest.write_bytes(good)
    assert _audit_checked(root, manifest).ok


def test_scheduler_audit_resumes_from_the_rows_the_cluster_sent(tmp_path, slow_progress) -> None:
    """--scheduler: rows arrive from a real Dask cluster and are committed as they arrive; an
    interrupted run resumes from them and ends as the local uninterrupted audit does."""
    distributed = pytest.importorskip("distributed")
    root = tmp_path / "ds"
    _make_tree(root, 60, 8192)
    manifest = tmp_path / "ds.sha256"
    build_manifest(root, manifest, jobs=2)
    flip_byte(root / "d2" / "f0057.bin", 100)
    state = tmp_path / "st.sqlite"
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       host="127.0.0.1", dashboard_address=None,
                                       memory_limit="1GiB")
    try:
        committed = _interrupted(root, manifest, state, 5, scheduler=cluster.scheduler_address)
        assert 0 < committed < 60
        resumed = _audit_checked(root, manifest, state=state,
                                 scheduler=cluster.scheduler_address)
    finally:
        cluster.close()
    local = _audit_checked(root, manifest, state=tmp_path / "local.sqlite", jobs=2)
    assert resumed.resumed == committed
    assert resumed.to_json()["files"] == local.to_json()["files"]
    assert resumed.counts["corrupted"] == 1 and resumed.counts["ok"] == 59


def test_a_foreign_database_is_refused_and_an_old_state_replaced(small_tree, tmp_path) -> None:
    root, manifest = small_tree
    foreign = tmp_path / "app.sqlite"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.execute("INSERT INTO users VALUES ('alice')")
    conn.commit()
    conn.close()
    with pytest.raises(UsageError, match="refusing to overwrite"):
        audit(root, manifest, state=foreign)
    conn = sqlite3.connect(foreign)
    assert conn.execute("SELECT name FROM users").fetchall() == [("alice",)]
    conn.close()
    old = tmp_path / "old.sqlite"
    conn = sqlite3.connect(old)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    conn.execute("INSERT INTO meta VALUES ('schema', '0'), ('status', 'running')")
    conn.execute("CREATE TABLE hashed (rel BLOB PRIMARY KEY)")
    conn.commit()
    conn.close()
    result = _audit_checked(root, manifest, state=old)
    assert result.ok and any("another kit version" in n for n in result.notes)


def test_a_refused_manifest_leaves_no_state_beside_it(tmp_path: Path) -> None:
    """A file that is no manifest is refused in one line, and the state database the audit
    made for it (holding no hash, nothing to resume) is not left beside it; a state that was
    there before is not removed."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(b"a")
    bad = tmp_path / "bad.sha256"
    bad.write_text("not a manifest\n")
    with pytest.raises(UsageError, match="not a sha256sum manifest"):
        audit(data, bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.sha256", "data"]
    good = tmp_path / "good.sha256"
    build_manifest(data, good)
    assert audit(data, good).ok
    state = Path(str(good) + ".audit.sqlite")
    assert state.is_file()
    good.write_text("not a manifest\n")
    with pytest.raises(UsageError, match="not a sha256sum manifest"):
        audit(data, good)
    assert state.is_file()
