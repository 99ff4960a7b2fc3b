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

import ckptrescue
from ckptrescue import imports_kept


def _collected(obj: object) -> bool:
    """``obj`` is in a generation that collection walks (a frozen object is in none)."""
    return any(o is obj for o in gc.get_objects())


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
    assert not _collected(module.MADE)


def test_a_library_caller_keeps_its_own_collection(fresh_module: str) -> None:
    assert not ckptrescue.own_process  # the tests call the kit as a library
    mine: list[object] = []
    with imports_kept():
        module = importlib.import_module(fresh_module)
    assert gc.isenabled()
    assert _collected(mine) and _collected(module.MADE)  # nothing frozen


def test_a_failed_import_freezes_nothing_and_enables_the_collector_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ckptrescue, "own_process", True)
    mine: list[object] = []
    with pytest.raises(ImportError), imports_kept():
        import ckptrescue_no_such_module  # noqa: F401
    assert gc.isenabled()
    assert _collected(mine)


def test_a_paused_collector_stays_paused(fresh_module: str) -> None:
    gc.disable()
    try:
        with imports_kept():
            importlib.import_module(fresh_module)
        assert not gc.isenabled()
    finally:
        gc.enable()
