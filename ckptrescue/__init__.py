"""ckptrescue: forensic incident response for corrupted ML checkpoints and datasets.

Only the version lives here; nothing is imported eagerly so that ``ckptrescue --help`` stays fast.
"""

__version__ = "0.1.0"
