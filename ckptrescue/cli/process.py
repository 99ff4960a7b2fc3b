"""The ``ckptrescue`` program's own process: what the console script and ``python -m
ckptrescue`` set once, before the command line is read, and that a library caller of
:func:`ckptrescue.cli.main.run` (the tests, a notebook) must not inherit.

Imports nothing but the standard library at module level: it runs before the command tree is
imported.
"""

from __future__ import annotations

import gc
import os
import sys


def main() -> None:
    """Console-script entry point."""
    # numpy's OpenBLAS starts a thread per core when it loads, and each spins for a while
    # (about 40 ms of CPU a thread here), taken from the scan's own processes. The kit's only
    # BLAS calls are dot products of training-metric series (trainstate), which one thread
    # serves; a value the responder set is kept.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # Start-up makes modules, classes and the command tree, and all of them live to the end:
    # a collection during it frees nothing and walks everything made so far (about 20 ms of a
    # 140 ms start, with the walk at exit). Collection is paused until the command line is
    # parsed; then run() freezes what start-up made, so no collection walks it again, and
    # collects the command's own objects as usual.
    gc.disable()
    import ckptrescue

    ckptrescue.own_process = True
    from ckptrescue.cli.main import run

    sys.exit(run(collection_paused=True))
