"""Codes for zip containers judged by their real readers: torch's ``PyTorchStreamReader``
(miniz) for torch zips, Python's ``zipfile`` for ``.keras`` and ``.npz``
(``docs/formats/torch-zip.md``, ``docs/formats/zip-container.md``)."""

from ckptrescue.model import Severity

E, W = Severity.ERROR, Severity.WARNING

CODES = {
    "TZ013": (E, "Zip end records torch's reader refuses: EOCD/zip64 record or locator out of "
              "range, multi-disk numbers, entry counts or central directory size inconsistent"),
    "TZ014": (E, "Central-directory entry torch's reader refuses: encryption or patch flags, "
              "unsupported method, disk number, sizes or local-header offset past the file"),
    "TZ015": (E, "Record names torch cannot use: entries not all under the first entry's "
              "prefix/, a non-UTF-8 name, no files, or the version record missing/invalid"),
    "TZ016": (W, "Duplicate record names: torch reads the one named (miniz's sorted lookup); "
              "the others are shadowed"),
    "TZ017": (E, "A record torch reads has no local header, data past the end of the file, "
              "overlaps another record, or reads as no bytes (directory attribute)"),
    "TZ018": (W, "A record is deflated (torch.save stores records): checked through a bounded "
              "inflate; its bytes are not at a file offset"),
    "TZ019": (E, "A compressed record does not inflate to its recorded size and CRC-32, or "
              "exceeds the decompression limits"),
    "TZ021": (E, "The zip parser stopped on a structure it cannot follow (reported, not "
              "raised): the file is unreadable to the kit"),
    "TZ022": (E, "The archive does not start with a local header (PK\\x03\\x04): torch.load "
              "only reads a file as a zip when its first four bytes are one"),
    "KR010": (E, "A deflated .keras member does not inflate to its recorded size and CRC-32, or "
              "exceeds the decompression limits"),
    "KR011": (E, "The .keras zip has a structure Python's zipfile (Keras' reader) refuses"),
}
