"""Codes of the Hugging Face hub cache check (``hub verify``): HB."""

from ckptrescue.model import Severity

CODES = {
    "HB001": (Severity.ERROR, "Hub cache: a blob does not match its name (SHA-256 or git blob "
                              "hash): every revision linking to it is broken"),
    "HB002": (Severity.ERROR, "Hub cache: a snapshot link is dangling (its blob is missing or "
                              "still an .incomplete download): its revision is broken"),
    "HB003": (Severity.WARNING, "Hub cache: an interrupted download (blobs/*.incomplete)"),
    "HB004": (Severity.ERROR, "Hub cache: a snapshot link leaves the repository's blobs/ or "
                              "loops: never followed"),
    "HB005": (Severity.ERROR, "Hub cache: a blob or link is unreadable (I/O error at the "
                              "offset)"),
    "HB006": (Severity.WARNING, "Hub cache: a ref names a revision with no snapshot in the "
                                "cache (loading it offline fails)"),
    "HB007": (Severity.WARNING, "Hub cache: an entry that is not what the layout holds (not a "
                                "regular file, an unrecognised blob name, a copied snapshot "
                                "file, a foreign folder)"),
}
