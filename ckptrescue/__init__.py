"""ckptrescue: forensic incident response for corrupted ML checkpoints and datasets.

Only the version and :data:`own_process` live here; nothing is imported eagerly so that
``ckptrescue --help`` stays fast.
"""

__version__ = "0.1.0"

#: True in the program's own process (set by ``cli.process.main``, the console script's and
#: ``python -m ckptrescue``'s entry, and by the kit's own child processes); False in a program
#: that calls the kit as a library (the tests, a notebook), whose process-wide state, such as
#: what its garbage collector walks, the kit must leave as it found it.
own_process = False
