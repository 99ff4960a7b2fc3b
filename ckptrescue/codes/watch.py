"""Codes emitted by ``ckptrescue watch`` (one incremental pass over a tree or an S3 prefix)."""

from ckptrescue.model import Severity

E, W = Severity.ERROR, Severity.WARNING

CODES = {
    "WA001": (E, "Watched file no longer matches its manifest hash (corrupted or rewritten)"),
    "WA002": (E, "Watched file's container check fails (bad records)"),
    "WA003": (E, "Watched file disappeared"),
    "WA004": (E, "Watched file is unreadable (I/O error)"),
    "WA005": (W, "Watched file was modified in place after it was first seen"),
}
