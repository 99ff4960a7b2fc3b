"""``ckptrescue watch``: incremental passes over a tree (inotify) and an S3 prefix (listing
deltas), findings in the case, a webhook and Prometheus textfile metrics."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from cli_helpers import EXE

from ckptrescue.datasets.manifest import build_manifest
from ckptrescue.datasets.watch.passes import run_pass
from ckptrescue.datasets.watch.state import WatchState
from fixtures.datasets import tree_digest, write_jsonl, write_webdataset_tar


def _dataset(root: Path) -> None:
    root.mkdir(parents=True)
    for i in range(3):
        write_jsonl(root / f"part-{i}.jsonl", lines=20)
    write_webdataset_tar(root / "shard-0.tar")


def test_passes_check_only_what_changed(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _dataset(root)
    manifest = tmp_path / "data.sha256"
    build_manifest(root, manifest, jobs=1)
    state = WatchState(tmp_path / "state.db", str(root))
    first = run_pass(str(root), state, manifest=str(manifest))
    assert first.full and first.checked == 4 and not first.findings
    before = tree_digest(root)
    again = run_pass(str(root), state, manifest=str(manifest))
    assert again.checked == 0 and not again.findings  # nothing changed: nothing read
    assert tree_digest(root) == before
    # a rewritten manifest file, a new damaged shard, a deleted file
    (root / "part-0.jsonl").write_text('{"id": 1}\n')
    (root / "part-9.jsonl").write_text('{"id": \n')
    (root / "part-2.jsonl").unlink()
    third = run_pass(str(root), state, manifest=str(manifest))
    codes = sorted((Path(b["path"]).name, b["code"]) for b in third.bad)
    assert codes == [("part-0.jsonl", "WA001"), ("part-2.jsonl", "WA003"),
                     ("part-9.jsonl", "WA002")]
    assert (third.new, third.changed, third.missing) == (1, 1, 1)
    targeted = run_pass(str(root), state, only=[b"part-1.jsonl"])
    assert not targeted.full and targeted.checked == 0
    state.close()
    with pytest.raises(Exception, match="belongs to"):
        WatchState(tmp_path / "state.db", str(tmp_path / "other"))


def test_without_a_manifest_a_file_modified_in_place_is_a_finding(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _dataset(root)
    state = WatchState(tmp_path / "state.db", str(root))
    run_pass(str(root), state)
    with open(root / "part-1.jsonl", "a") as fh:
        fh.write('{"id": 99}\n')
    result = run_pass(str(root), state)
    assert [b["code"] for b in result.bad] == ["WA005"]


def test_s3_listing_deltas(tmp_path: Path, s3server: Any) -> None:
    writer = s3server.writer_client()
    writer.create_bucket(Bucket="watched")
    for i in range(3):
        writer.put_object(Bucket="watched", Key=f"data/part-{i}.jsonl", Body=b'{"i": %d}\n' % i)
    url = "s3://watched/data/"
    state = WatchState(tmp_path / "s3.db", url)
    first = run_pass(url, state, endpoint_url=s3server.endpoint_url)
    assert first.checked == 3 and not first.findings
    time.sleep(1.1)  # LastModified has one-second resolution
    writer.put_object(Bucket="watched", Key="data/part-0.jsonl", Body=b'{"i": 100}\n')
    writer.delete_object(Bucket="watched", Key="data/part-1.jsonl")
    second = run_pass(url, state, endpoint_url=s3server.endpoint_url)
    assert sorted(b["code"] for b in second.bad) == ["WA003", "WA005"]
    assert second.checked == 1 and second.bytes_read == 0  # nothing downloaded


class _Receiver(http.server.BaseHTTPRequestHandler):
    received: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return


def test_the_command_watches_with_inotify_alerts_and_metrics(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _dataset(root)
    manifest = tmp_path / "data.sha256"
    build_manifest(root, manifest, jobs=1)
    server = http.server.HTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    prom = tmp_path / "metrics" / "ckptrescue.prom"
    case = tmp_path / "case"
    proc = subprocess.Popen(
        [EXE, "watch", str(root), "--case", str(case), "--state", str(tmp_path / "w.db"),
         "--manifest", str(manifest), "--interval", "60", "--passes", "2",
         "--webhook", f"http://127.0.0.1:{server.server_port}/hook",
         "--prometheus-textfile", str(prom)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not prom.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert prom.exists(), "the first pass did not finish"
        (root / "part-1.jsonl").write_text('{"tampered": true}\n')  # inotify wakes the watch
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        server.shutdown()
    assert proc.returncode == 1, err
    assert "WA001" in out and "targeted pass: 1 file(s) checked" in out
    [alert] = _Receiver.received
    assert alert["findings"][0]["code"] == "WA001" and alert["source"] == str(root)
    metrics = prom.read_text()
    assert 'ckptrescue_watch_bad_files{source="' in metrics
    assert "ckptrescue_watch_files_checked_total" in metrics and "} 5" in metrics
    from ckptrescue.record.case import Case

    opened = Case.open(case)
    assert [f.code for f in opened.findings()] == ["WA001"]
    assert opened.verify().ok


def test_the_state_may_not_live_inside_the_source(tmp_path: Path) -> None:
    from cli_helpers import invoke

    root = tmp_path / "data"
    _dataset(root)
    result = invoke("watch", str(root), "--case", str(tmp_path / "case"), "--state",
                    str(root / "state.db"), "--passes", "1")
    assert result.returncode == 2 and "outside" in result.stderr
    assert not (root / "state.db").exists()
    # the same folder reached through a link outside it: the folders are resolved
    (tmp_path / "elsewhere").symlink_to(root / "sub")
    (root / "sub").mkdir()
    before = tree_digest(root)
    result = invoke("watch", str(root), "--case", str(tmp_path / "case2"), "--state",
                    str(tmp_path / "elsewhere" / "state.db"), "--passes", "1")
    assert result.returncode == 2 and "outside" in result.stderr
    assert tree_digest(root) == before


def test_a_missing_source_is_a_one_line_error_and_no_case_is_made(tmp_path: Path) -> None:
    from cli_helpers import invoke

    result = invoke("watch", str(tmp_path / "nope"), "--case", str(tmp_path / "case"),
                    "--state", str(tmp_path / "w.db"), "--passes", "1")
    assert result.returncode == 2 and "not a directory" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "case").exists()


@contextlib.contextmanager
def _watching(root: Path, state: Path, case: Path) -> Iterator[subprocess.Popen[str]]:
    """A ``watch`` of ``root`` running (its first pass done) until the block ends, then
    stopped with Ctrl-C (exit 130)."""
    first = subprocess.Popen(
        [EXE, "watch", str(root), "--case", str(case), "--state", str(state),
         "--interval", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        for line in first.stdout:  # (its end, too, ends the wait)
            if "full pass" in line:
                break
        assert first.poll() is None, first.communicate()
        yield first
    finally:
        os.killpg(first.pid, signal.SIGINT)
        try:
            first.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(first.pid, signal.SIGKILL)
            first.communicate()
    assert first.returncode == 130


def test_a_second_watch_of_the_same_state_is_refused_before_its_first_pass(
        tmp_path: Path) -> None:
    from cli_helpers import invoke

    root = tmp_path / "data"
    _dataset(root)
    before = tree_digest(root)
    state = tmp_path / "w.db"
    with _watching(root, state, tmp_path / "case-a") as first:
        second = invoke("watch", str(root), "--case", str(tmp_path / "case-b"), "--state",
                        str(state), "--passes", "1")
        assert second.returncode == 2, second.stdout + second.stderr
        assert second.stderr.strip().splitlines()[0] == \
            f"ckptrescue: error: {state}: another watch is using this state"
        assert first.poll() is None  # the first watch goes on, untouched
    # released with the first watch: the same command now runs
    again = invoke("watch", str(root), "--case", str(tmp_path / "case-b"), "--state",
                   str(state), "--passes", "1")
    assert again.returncode == 0, again.stdout + again.stderr
    assert tree_digest(root) == before


WATCH_PLAYBOOK = """schema: 1
name: watch-once
title: One watch pass
parameters:
  - {name: source, type: directory, description: "The watched tree"}
  - {name: state, type: string, description: "The watch state"}
steps:
  - id: pass
    action: watch.pass
    with: {source: $source, state: $state}
"""


def test_a_playbook_s_watch_pass_holds_its_state_for_the_pass(tmp_path: Path) -> None:
    """A playbook's ``watch.pass`` step takes the state's hold for its pass: while a ``watch``
    holds the state, the step is refused before it starts (the watch goes on, its state
    untouched by the step); alone, it runs and lets the hold go, so the watch can start."""
    from cli_helpers import invoke

    root = tmp_path / "data"
    _dataset(root)
    state = tmp_path / "w.db"
    book = tmp_path / "watch-once.yaml"
    book.write_text(WATCH_PLAYBOOK)
    argv = ("playbook", "run", str(book), "-p", f"source={root}", "-p", f"state={state}")
    with _watching(root, state, tmp_path / "case-a") as first:
        before = state.read_bytes()
        res = invoke(*argv, "--case", str(tmp_path / "case-b"))
        assert res.returncode != 0, res.stdout + res.stderr
        assert "another watch is using this state" in res.stdout + res.stderr, \
            res.stdout + res.stderr
        assert "database is locked" not in res.stdout + res.stderr
        assert state.read_bytes() == before
        assert first.poll() is None
    res = invoke(*argv, "--case", str(tmp_path / "case-c"))
    assert res.returncode == 0, res.stdout + res.stderr
    again = invoke("watch", str(root), "--case", str(tmp_path / "case-d"), "--state",
                   str(state), "--passes", "1")
    assert again.returncode == 0, again.stdout + again.stderr


def test_a_state_among_the_cases_records_is_refused_before_anything_is_made(
        tmp_path: Path) -> None:
    from cli_helpers import invoke

    root = tmp_path / "data"
    _dataset(root)
    case = tmp_path / "case"
    invoke("case", "new", str(case), "--title", "t")
    state = case / "artifacts" / "sub" / "x.sqlite"
    res = invoke("watch", str(root), "--case", str(case), "--state", str(state),
                 "--passes", "1")
    assert res.returncode == 3, res.stdout + res.stderr
    assert not state.exists() and not state.parent.exists()


def test_a_pass_s_own_hold_is_not_lent_to_another_pass_in_the_process(tmp_path: Path) -> None:
    """Two passes in one process (two TUI runs, a library's threads) on one state: the second
    is refused by the lock, as from another process; only a watch run's hold is shared with
    its own passes."""
    from ckptrescue.datasets.watch.state import held_for_a_pass, hold, release
    from ckptrescue.errors import UsageError

    src = tmp_path / "data"
    src.mkdir()
    state = tmp_path / "w.db"
    with held_for_a_pass(state, str(src)):
        with pytest.raises(UsageError, match="another watch is using this state"), \
                held_for_a_pass(state, str(src)):
            pass
        assert state.exists()  # the refused pass removed nothing
    (tmp_path / "alias").symlink_to(tmp_path)
    run = hold(state, str(src))  # a watch run's hold: its passes share it, however spelled
    try:
        with held_for_a_pass(tmp_path / "alias" / "w.db", str(src)):
            pass
    finally:
        release(run)
