"""Training-data integrity: checksum manifests and audits, container checks, recovery.

Public entry points (import the module you need; nothing heavy is imported here):

* :func:`ckptrescue.datasets.manifest.build_manifest` -> ``ManifestResult``
* :func:`ckptrescue.datasets.audit.audit` -> ``AuditResult``
* :func:`ckptrescue.datasets.verify.verify_dataset` -> ``DatasetVerifyResult``
* :func:`ckptrescue.datasets.recover.recover` -> ``RecoverResult``

Pure parts (bytes in, results out): ``sha256sum_format``, ``detect``, ``crc32c``, and the format
checkers ``tfrecord``, ``tarshards``, ``jsonl``, ``npy`` (``parquet`` needs pyarrow). Effects:
``walk``/``hashing`` read files, ``cluster`` talks to Dask, ``recover`` writes the recovery
directory. See docs/datasets.md.
"""
