"""``store preserve`` into a folder where an earlier preserve's journal is a FIFO: the resume
reads the journal, and a FIFO there would block the kit for ever. It is refused at once (exit
3), nothing is fetched into the folder, the store is unchanged. moto over real HTTP."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import invoke
from stores_testlib import make_kit


def test_a_fifo_journal_in_the_destination_is_refused_not_waited_on(
        request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    kit: Any = make_kit("s3", request, monkeypatch)
    kit.put("run/step-1/notes.txt", b"kept\n")
    before = kit.state()
    dest = tmp_path / "preserved"
    dest.mkdir()
    journal = dest / "preserve.jsonl"
    os.mkfifo(journal)
    # should the kit block on the FIFO, open its other end after a while so the test ends (the
    # kit then reads an empty journal and refuses for another reason: no "FIFO" in it)
    release = threading.Timer(120, lambda: os.close(os.open(journal, os.O_RDWR)))
    release.start()
    try:
        r = invoke("store", "preserve", kit.url("run/"), "--dest", str(dest),
                   "--endpoint-url", kit.options.endpoint_url)
    finally:
        release.cancel()
    assert r.returncode == 3 and "FIFO" in r.stderr, (r.returncode, r.stderr)
    assert sorted(p.name for p in dest.iterdir()) == ["preserve.jsonl"]
    assert kit.state() == before
