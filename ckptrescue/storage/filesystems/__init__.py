"""One module per filesystem (``FILESYSTEMS = [Class, ...]``); see ``ckptrescue/storage/filesystem.py``
and ``_example.py``."""
