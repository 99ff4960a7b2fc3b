"""``ckptrescue.imports_kept``: collection paused for the block's imports; in the kit's own process
(``ckptrescue.own_process``) what the process holds is frozen after imports that succeeded; a
program that runs the drill as a library keeps its own collection; the collector is left as it
was found, also when an import fails (the silent drill's missing torch is a one-line error)."""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from process_helpers import collected

import ckptrescue
from ckptrescue import imports_kept


@pytest.fixture
def fresh_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The name of a module no one has imported yet."""
    name = f"ckptrescue_kept_{tmp_path.name}"
    (tmp_path / f"{name}.py").write_text("MADE = [[i] for i in range(100)]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_in_the_kits_own_process_what_it_holds_is_frozen_after_the_imports(
        fresh_module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ckptrescue, "own_process", True)
    before = gc.get_freeze_count()
    with imports_kept():
        assert not gc.isenabled()
        module = importlib.import_module(fresh_module)
    assert gc.isenabled()
    assert gc.get_freeze_count() >= before + len(module.MADE)
    assert not collected(module.MADE)


def test_a_library_caller_keeps_its_own_collection(fresh_module: str) -> None:
    assert not ckptrescue.own_process  # the tests call the kit as a library
    mine: list[object] = []
    with imports_kept():
        module = importlib.import_module(fresh_module)
    assert gc.isenabled()
    assert collected(mine) and collected(module.MADE)  # nothing frozen


def test_a_failed_import_freezes_nothing_and_enables_the_collector_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ckptrescue, "own_process", True)
    mine: list[object] = []
    with pytest.raises(ImportError), imports_kept():
        import ckptrescue_no_such_module  # noqa: F401
    assert gc.isenabled()
    assert collected(mine)


def test_a_paused_collector_stays_paused(fresh_module: str) -> None:
    gc.disable()
    try:
        with imports_kept():
            importlib.import_module(fresh_module)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_collection_stays_paused_until_the_last_of_overlapping_blocks_ends() -> None:
    """The first S3 clients of a verify are made at once, on threads, each in a block: one
    thread's block may end while another's runs (here in one thread, in that order)."""
    first, second = imports_kept(), imports_kept()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert not gc.isenabled()  # the second block still runs
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_blocks_in_several_threads_resume_collection_as_found() -> None:
    import threading
    import time

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        def enter_often() -> None:
            for _ in range(300):
                with imports_kept():
                    time.sleep(0)  # another thread's block begins or ends here
                time.sleep(0)

        threads = [threading.Thread(target=enter_often) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(switch)
    assert gc.isenabled()
