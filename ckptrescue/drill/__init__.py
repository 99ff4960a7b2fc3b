"""The drill: build a realistic, synthetic incident so responders can rehearse end to end.

Nothing here touches evidence: the drill *creates* a disk image, checkpoints and a bucket. It is
the one place allowed to build filesystems (``mkfs.xfs -p``, no mount needed) and to write to an
S3 endpoint — its own moto server on 127.0.0.1.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import ckptrescue


@contextmanager
def imports_kept() -> Iterator[None]:
    """Pause collection for the imports in the block; in the program's own process, freeze
    what the process then holds once they have succeeded.

    torch and TensorFlow make hundreds of thousands of objects when imported, all kept to the
    end. A collection during the imports frees nothing and walks everything made so far; after
    them, each collection of the oldest generation walked everything again while the drill
    trained and saved (a quarter of the drill's CPU). Frozen objects are never walked again.
    A freeze takes every object the process holds, so it happens only in the kit's own process
    (:data:`ckptrescue.own_process`) and only when the block imported something: a program
    that runs the drill as a library keeps its own collection."""
    enabled = gc.isenabled()
    modules = len(sys.modules)
    gc.disable()
    try:
        yield
        if ckptrescue.own_process and len(sys.modules) > modules:
            gc.freeze()
    finally:
        if enabled:
            gc.enable()
