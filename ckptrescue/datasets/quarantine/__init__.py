"""Quarantine lists: what a training job must skip while recovery runs.

:mod:`listing` (pure) builds a :class:`~ckptrescue.datasets.quarantine.listing.Quarantine` from a dataset
audit or verify result — whole files (corrupted, changed, missing, unreadable) and single
records (a bad TFRecord record, tar sample, JSONL line, Parquet row group) — and writes it as
JSON (``ckptrescue.datasets.quarantine/1``) and as a plain list of paths. The adapters let the loaders
people use consume it without ckptrescue in the training image beyond this package:
:mod:`torch_data` (``Dataset`` / ``IterableDataset`` wrappers), :mod:`webdataset` (a sample
filter), :mod:`hf` (a ``datasets.Dataset.filter`` predicate).
"""

from ckptrescue.datasets.quarantine.listing import Quarantine, QuarantinedRecord

__all__ = ["Quarantine", "QuarantinedRecord"]
