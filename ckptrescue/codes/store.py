"""Codes emitted by the object-store commands for Azure Blob and GCS (``ckptrescue.stores``), and
for S3 where S3 has no code of its own (``ckptrescue/stores/kinds.py``: one kind, a code per
backend; ``codes/s3.py`` the S3 ones)."""

from ckptrescue.model import Severity

CODES = {
    "OS001": (Severity.ERROR, "Object bytes do not match the store's stored MD5/CRC32C (Azure "
                              "Content-MD5, GCS md5Hash/crc32c)"),
    "OS002": (Severity.WARNING, "An object under the prefix has no local counterpart"),
    "OS003": (Severity.INFO, "Local files have no object under the prefix (one finding, the "
                            "keys in its details)"),
    "OS004": (Severity.INFO, "An object carries no stored value the kit can recompute"),
    "OS005": (Severity.ERROR, "An object could not be read (access denied, read error)"),
    "OS006": (Severity.INFO, "A composite GCS object: no md5Hash, verified by CRC32C only"),
    "OS007": (Severity.ERROR, "Local file does not match the object's stored MD5/CRC32C"),
    "OS008": (Severity.INFO, "Probed in place: bytes of objects read through ranged GETs"),
    "OS010": (Severity.WARNING, "Version-history anomaly (no/several current versions, only "
                                "deleted or soft-deleted versions left)"),
    "OS011": (Severity.INFO, "Last known-good version identified from a manifest"),
    "OS012": (Severity.WARNING, "No version of the object matches the manifest"),
    "OS013": (Severity.INFO, "Soft-deleted blob or object listed (never undeleted by the kit)"),
    "OS020": (Severity.WARNING, "Versioning is not enabled (or not visible): overwrites and "
                                "deletes may be final"),
    "OS021": (Severity.WARNING, "No immutability policy, legal hold or locked retention"),
    "OS022": (Severity.INFO, "The container/bucket keeps immutable versions"),
    "OS023": (Severity.WARNING, "Soft delete is off: deleted objects are gone at once"),
    "OS024": (Severity.INFO, "A protection setting could not be read (not exposed or denied)"),
    "OS030": (Severity.ERROR, "Preserved bytes do not match the stored value (kept as "
                              "received)"),
    "OS031": (Severity.INFO, "Object preserved (into the local folder, any store; into the "
                            "case, Azure/GCS), verified"),
    "OS040": (Severity.INFO, "Version restored into the recovery folder and verified"),
    "OS041": (Severity.ERROR, "Restored version does not verify (kept as .unverified)"),
}
