"""ckptrescue: forensic incident response for corrupted ML checkpoints and datasets.

Only the version and the process's collection policy (:data:`own_process`,
:class:`imports_kept`) live here; nothing is imported eagerly so that ``ckptrescue --help``
stays fast.
"""

from __future__ import annotations

import gc
import sys
from types import TracebackType

__version__ = "0.1.0"

#: True in the program's own process (set by ``cli.process.main``, the console script's and
#: ``python -m ckptrescue``'s entry, and by the kit's own child processes); False in a program
#: that calls the kit as a library (the tests, a notebook), whose process-wide state, such as
#: what its garbage collector walks, the kit must leave as it found it.
own_process = False


class imports_kept:  # noqa: N801 - used as a statement: ``with imports_kept(): import torch``
    """Pause collection for the imports in the block; in the program's own process, freeze
    what the process then holds once they have succeeded.

    torch, TensorFlow, boto3 (its service models) and Textual make tens to hundreds of thousands
    of objects when imported, all kept to the end. A collection during the imports frees nothing
    and walks everything made so far; after them, each collection of the oldest generation
    walked everything again (a quarter of the drill's CPU; 60 ms of an S3 client's first 315).
    Frozen objects are never walked again. A freeze takes every object the process holds, so it
    happens only in the kit's own process (:data:`own_process`) and only when the block imported
    something: a program that uses the kit as a library keeps its own collection. Threads may
    enter at once: the one that paused collection enables it again."""

    def __enter__(self) -> None:
        self._enabled = gc.isenabled()
        self._modules = len(sys.modules)
        gc.disable()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if kind is None and own_process and len(sys.modules) > self._modules:
            gc.freeze()
        if self._enabled:
            gc.enable()
