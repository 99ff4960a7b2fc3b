"""Codes the object-store commands emit for S3 (``store …`` and ``s3 …`` on s3:// URLs;
``ckptrescue/stores/kinds.py`` maps each kind of finding to its code per backend)."""

from ckptrescue.model import Severity

CODES = {
    "S3001": (Severity.ERROR, "Local file (or downloaded bytes) does not match the object's "
                              "stored checksum or ETag"),
    "S3002": (Severity.WARNING, "An object under the prefix has no local counterpart"),
    "S3003": (Severity.INFO, "Local files have no object under the prefix (one finding, the "
                            "keys in its details)"),
    "S3004": (Severity.INFO, "An object could not be verified without downloading it"),
    "S3005": (Severity.ERROR, "An object could not be read (access denied or read error)"),
    "S3010": (Severity.WARNING, "Version-history anomaly (no/several latest versions, delete "
                                "marker on top, null version mid-history, equal timestamps)"),
    "S3011": (Severity.INFO, "Last known-good version identified from a manifest"),
    "S3012": (Severity.WARNING, "No version of the key matches the manifest"),
    "S3013": (Severity.INFO, "CloudTrail names who wrote, completed or deleted a version"),
    "S3020": (Severity.WARNING, "Bucket versioning is not enabled: overwrites and deletes are "
                                "not recoverable"),
    "S3021": (Severity.WARNING, "No Object Lock: versions can be deleted for good"),
    "S3022": (Severity.INFO, "Bucket keeps immutable versions (versioning and Object Lock)"),
    "S3030": (Severity.ERROR, "Preserved bytes do not match the object's stored checksum "
                              "(kept as received)"),
    "S3031": (Severity.INFO, "Object preserved into the case, verified (into a local folder: "
                            "OS031)"),
    "S3040": (Severity.INFO, "Version restored into the recovery folder and verified"),
    "S3041": (Severity.ERROR, "Restored version does not verify (kept as .unverified)"),
}
