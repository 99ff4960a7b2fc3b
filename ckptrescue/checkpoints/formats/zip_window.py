"""Torch zips read over a byte window of an archive (the members of a plain tar, the weights
of a ``.nemo``): each probed exactly as a file (``torch_zip.probe_zip``), its tensors keeping
their offsets in the archive; what the zips of one archive share (globals, records, storages,
strides) gathered for the report's ``extra``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, BinaryIO

from ckptrescue.checkpoints.base import CheckpointReport
from ckptrescue.checkpoints.formats import tensormap
from ckptrescue.checkpoints.formats.torch_zip_records import ZipProbe
from ckptrescue.model import JsonObject


@dataclass
class ZipWindows:
    """The torch zips of one archive (``path``), probed in turn into ``report``."""

    report: CheckpointReport
    numeric: bool = True
    extra_allowed: frozenset[str] = frozenset()
    globals_: set[str] = field(default_factory=set)
    unsafe: set[str] = field(default_factory=set)
    records: list[dict[str, Any]] = field(default_factory=list)
    storages: dict[str, Any] = field(default_factory=dict)
    strides: dict[str, list[int]] = field(default_factory=dict)

    def probe(self, fh: BinaryIO, start: int, end: int, prefix: str) -> ZipProbe:
        """The zip in ``[start, end)``: tensor names, storage keys and storages get ``prefix``
        (a member's name when the archive holds more than one); its tensors and findings go
        into the report."""
        from ckptrescue.checkpoints.formats.torch_zip import probe_zip

        z = probe_zip(fh, self.report.path, start=start, end=end, do_numeric=self.numeric,
                      name_prefix=prefix, extra_allowed=self.extra_allowed)
        for rec in z.tensors:
            if prefix and rec.storage is not None:
                rec.storage = f"{prefix}{rec.storage}"
        self.report.tensors.extend(z.tensors)
        self.report.findings.extend(z.findings)
        self.globals_.update(z.globals)
        self.unsafe.update(z.unsafe_globals)
        self.records.extend(z.records)
        self.strides.update(z.strides)
        for key, st in tensormap.storage_map(z.storages).items():
            self.storages[f"{prefix}{key}"] = st
        return z

    def extra(self) -> JsonObject:
        return {"globals": sorted(self.globals_), "unsafe_globals": sorted(self.unsafe),
                "strides": self.strides, "records": self.records, "storages": self.storages}
