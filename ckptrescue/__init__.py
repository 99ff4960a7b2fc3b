"""ckptrescue: forensic incident response for corrupted ML checkpoints and datasets.

Only the version and the process's collection policy (:data:`own_process`,
:class:`imports_kept`) live here; nothing is imported eagerly so that ``ckptrescue --help``
stays fast.
"""

from __future__ import annotations

import _thread
import gc
import sys
from types import TracebackType

__version__ = "0.1.0"

#: True in the program's own process (set by ``cli.process.main``, the console script's and
#: ``python -m ckptrescue``'s entry, and by the drill's TensorFlow child); False in a program
#: that calls the kit as a library (the tests, a notebook), whose process-wide state, such as
#: what its garbage collector walks, the kit must leave as it found it.
own_process = False


class _Kept:
    """The blocks of :class:`imports_kept` open in any thread: how many, the collector's state
    before the first, the number of modules then, and whether one of them failed."""

    lock = _thread.allocate_lock()
    open = 0
    enabled = False
    modules = 0
    failed = False


class imports_kept:  # noqa: N801 - used as a statement: ``with imports_kept(): import torch``
    """Pause collection while blocks of imports run; in the program's own process, freeze what
    the process holds when the last block has ended, if none failed and modules were imported.

    torch, TensorFlow, boto3 (its service models) and Textual make tens to hundreds of thousands
    of objects when imported, all kept to the end. A collection during the imports frees nothing
    and walks everything made so far; after them, each collection of the oldest generation
    walked everything again (a quarter of the drill's CPU; boto3's first client took 315 ms
    with it and 255 ms without). Frozen objects are never walked again. A freeze takes every
    object the process holds, so it happens only in the kit's own process (:data:`own_process`),
    and only when modules were imported (by any thread) while the blocks ran: a program that
    uses the kit as a library keeps its own collection. Blocks may run in several threads at
    once (the first S3 clients of a verify): collection is paused by the first to begin and
    resumed by the last to end, as it was found."""

    def __enter__(self) -> None:
        with _Kept.lock:
            if not _Kept.open:
                _Kept.enabled, _Kept.modules, _Kept.failed = gc.isenabled(), len(sys.modules), False
                gc.disable()
            _Kept.open += 1

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with _Kept.lock:
            _Kept.open -= 1
            _Kept.failed = _Kept.failed or kind is not None
            if _Kept.open:
                return
            if own_process and not _Kept.failed and len(sys.modules) > _Kept.modules:
                gc.freeze()
            if _Kept.enabled:
                gc.enable()
