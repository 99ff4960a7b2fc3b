"""The drill: build a realistic, synthetic incident so responders can rehearse end to end.

Nothing here touches evidence: the drill *creates* a disk image, checkpoints and a bucket. It is
the one place allowed to build filesystems (``mkfs.xfs -p``, no mount needed) and to write to an
S3 endpoint — its own moto server on 127.0.0.1.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def imports_kept() -> Iterator[None]:
    """Pause collection for the imports in the block, and freeze what they made.

    torch and TensorFlow make hundreds of thousands of objects when imported, all kept to the
    end. A collection during the imports frees nothing and walks everything made so far; after
    them, each full collection walked everything again while the drill trained and saved (a
    quarter of the drill's CPU). Frozen objects are never walked again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
