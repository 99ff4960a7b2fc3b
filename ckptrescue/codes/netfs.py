"""Codes emitted for network and parallel filesystems (NFS, Lustre, GPFS, CephFS, BeeGFS,
WekaFS, FUSE): storage identity for copies, stale metadata (``ckptrescue/storage/netfs.py``).
NF001-NF019 are reserved for this area."""

from ckptrescue.model import Severity

CODES = {
    "NF001": (Severity.ERROR, "Size from the metadata server exceeds the bytes a read returns "
              "(stale metadata: the read ends early)"),
    "NF002": (Severity.ERROR, "Reading a file's last block on a network/parallel filesystem fails "
              "(EIO: its data server or OST is unreachable)"),
    "NF003": (Severity.WARNING, "Data readable past the size the metadata server reports"),
    "NF004": (Severity.INFO, "Copy source on a network/parallel filesystem; destination proven "
              "to be other storage"),
    "NF005": (Severity.ERROR, "Copy refused: the destination could be the same network/parallel "
              "storage as the source"),
}
