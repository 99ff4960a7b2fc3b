"""Finding kinds of the object-store operations and the code each backend reports for them
(pure). One operation, one kind of finding, whatever the store; the S3 backend keeps the S3xxx
codes its commands always reported, Azure and GCS report OSxxx, and a kind S3 never had a code
for falls back to the OSxxx one (``docs/finding-codes.md`` describes each code)."""

from __future__ import annotations

OS_CODES: dict[str, str] = {
    "content-mismatch": "OS001",  # streamed bytes vs the stored values
    "missing-local": "OS002",
    "missing-remote": "OS003",
    "unverifiable": "OS004",  # no stored value the kit can recompute
    "unverifiable-local": "OS004",  # ... without downloading it
    "unreadable": "OS005",
    "composite": "OS006",
    "local-mismatch": "OS007",  # a local file vs the stored values
    "probed-in-place": "OS008",
    "anomaly": "OS010",
    "known-good": "OS011",
    "no-known-good": "OS012",
    "soft-deleted": "OS013",
    "versioning": "OS020",
    "no-lock": "OS021",
    "immutable": "OS022",
    "no-soft-delete": "OS023",
    "setting-unknown": "OS024",
    "preserve-mismatch": "OS030",
    "preserved-folder": "OS031",
    "preserved-case": "OS031",
    "restored": "OS040",
    "restore-mismatch": "OS041",
}

S3_CODES: dict[str, str] = {**OS_CODES, **{
    "content-mismatch": "S3001",
    "local-mismatch": "S3001",
    "missing-local": "S3002",
    "missing-remote": "S3003",
    "unverifiable-local": "S3004",
    "unreadable": "S3005",
    "anomaly": "S3010",
    "known-good": "S3011",
    "no-known-good": "S3012",
    "writer": "S3013",  # CloudTrail names who wrote or deleted a version
    "versioning": "S3020",
    "no-lock": "S3021",
    "immutable": "S3022",
    "preserve-mismatch": "S3030",
    "preserved-case": "S3031",  # into the case's evidence (a folder: OS031)
    "restored": "S3040",
    "restore-mismatch": "S3041",
}}
