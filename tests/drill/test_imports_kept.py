"""``drill.imports_kept``: collection paused for the block's imports, what they made frozen,
and the collector left as it was found, also when an import fails (the silent drill's missing
torch is a one-line error, and the process it runs in goes on)."""

from __future__ import annotations

import gc

import pytest

from ckptrescue.drill import imports_kept


def test_paused_inside_frozen_after_and_enabled_again() -> None:
    assert gc.isenabled()
    before = gc.get_freeze_count()
    with imports_kept():
        assert not gc.isenabled()
        kept = [[i] for i in range(1000)]  # objects the collector tracks
    assert gc.isenabled()
    assert gc.get_freeze_count() >= before + len(kept)


def test_a_failed_import_leaves_the_collector_enabled() -> None:
    with pytest.raises(ImportError), imports_kept():
        import ckptrescue_no_such_module  # noqa: F401
    assert gc.isenabled()


def test_a_paused_collector_stays_paused() -> None:
    gc.disable()
    try:
        with imports_kept():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
