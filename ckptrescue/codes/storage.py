"""Codes emitted by the block-storage area (devices, triage, imaging, mounts, filesystems, health,
locate, copy, extract)."""

from ckptrescue.model import Severity

CODES = {
    # triage
    "TR001": (Severity.CRITICAL, "A process has files open for writing on the affected volume"),
    "TR002": (Severity.WARNING, "A training job appears to be running against the volume"),
    "TR003": (Severity.WARNING, "A backup or sync agent is running and may propagate damage"),
    "TR004": (Severity.ERROR, "Kernel log shows I/O errors, filesystem corruption or NVMe errors"),
    "TR005": (Severity.INFO, "The volume is being written to (measured write rate)"),
    # imaging
    "IM001": (Severity.ERROR, "Unreadable sectors: the image has bad ranges (read as zeros)"),
    "IM002": (Severity.WARNING, "Imaging did not finish: untried or unscraped ranges remain"),
    "IM003": (Severity.INFO, "Source fully read: image equals the source"),
    "IM004": (Severity.WARNING, "Imaging destination is volatile memory (tmpfs)"),
    # mount
    "MT001": (Severity.INFO, "Mounted read-only on a read-only block device without log replay"),
    "MT002": (Severity.WARNING, "Filesystem mounted with nouuid: a clone of a mounted filesystem"),
    # XFS
    "XF001": (Severity.ERROR, "XFS log is dirty: unreplayed metadata changes are in the log"),
    "XF002": (Severity.CRITICAL, "XFS NEEDSREPAIR feature bit set"),
    "XF003": (Severity.WARNING, "XFS log_incompat bits set: replay needs a kernel knowing them"),
    "XF004": (Severity.ERROR, "xfs_repair -n reports inconsistencies"),
    "XF005": (Severity.CRITICAL, "XFS superblock inprogress flag set (mkfs never finished)"),
    "XF006": (Severity.ERROR, "XFS superblock is unreadable or has a bad magic/CRC"),
    "XF007": (Severity.INFO, "XFS log is clean"),
    # ext4
    "E4001": (Severity.ERROR, "ext4 journal needs recovery (needs_recovery): unreplayed changes"),
    "E4002": (Severity.ERROR, "ext4 filesystem state is not clean"),
    "E4003": (Severity.ERROR, "ext4 recorded filesystem errors (error count / last error)"),
    "E4004": (Severity.INFO, "ext4 journal is clean"),
    # ZFS
    "ZF001": (Severity.ERROR, "ZFS pool is not ONLINE"),
    "ZF002": (Severity.ERROR, "ZFS vdev has read, write or checksum errors"),
    "ZF003": (Severity.CRITICAL, "ZFS reports permanent errors in files"),
    "ZF004": (Severity.ERROR, "ZFS event log records checksum, I/O or data errors"),
    "ZF005": (Severity.WARNING, "ZFS dataset with checksum=off: corruption there goes undetected"),
    "ZF006": (Severity.WARNING, "ZFS vdev label: pool was not exported (in use when it stopped)"),
    "ZF007": (Severity.ERROR, "ZFS vdev labels unreadable or inconsistent"),
    "ZF010": (Severity.WARNING, "ZFS pool never exported: imported read-only with -f from an image"),
    "ZF011": (Severity.INFO, "ZFS pool imported under a kit-made temporary name (ckr_...)"),
    "ZF012": (Severity.WARNING, "Encrypted ZFS dataset without its key: not mounted"),
    # SMART
    "SM001": (Severity.CRITICAL, "SMART overall health self-assessment failed (DISK FAILING)"),
    "SM002": (Severity.ERROR, "SMART prefail attributes at or below threshold"),
    "SM003": (Severity.WARNING, "SMART attributes were at or below threshold in the past"),
    "SM004": (Severity.WARNING, "SMART error log or self-test log has error records"),
    "SM005": (Severity.INFO, "SMART could not be read from the device (open or command failed)"),
    "SM006": (Severity.ERROR, "Reallocated, pending or offline-uncorrectable sectors present"),
    # NVMe
    "NV001": (Severity.CRITICAL, "NVMe critical warning bits set"),
    "NV002": (Severity.ERROR, "NVMe media and data integrity errors recorded"),
    "NV003": (Severity.ERROR, "NVMe available spare below threshold"),
    "NV004": (Severity.WARNING, "NVMe percentage used at or beyond 100%"),
    "NV005": (Severity.WARNING, "NVMe error log has entries"),
    "NV006": (Severity.ERROR, "NVMe error log records media errors at given LBAs"),
    # locate
    "LC001": (Severity.ERROR, "Unreadable range lies in a file (tensors named when known)"),
    "LC002": (Severity.WARNING, "Unreadable range holds no regular-file data (metadata or free)"),
    "LC003": (Severity.ERROR, "Unreadable range in a shared (reflinked) extent: every owner hit"),
    "LC004": (Severity.WARNING, "The mapfile covers more bytes than the image: another device's?"),
    "LC005": (Severity.WARNING, "Unreadable range in a filesystem or volume that was not mapped"),
    # copy
    "CP001": (Severity.WARNING, "Copy source is mounted read-write"),
    "CP002": (Severity.ERROR, "Verify pass found differences between source and copy"),
    "CP003": (Severity.INFO, "Copy verified: rsync checksum pass and SHA-256 manifests agree"),
    "CP004": (Severity.ERROR, "Files could not be read during the copy"),
    "CP005": (Severity.WARNING, "Datasets of the ZFS pool are not mounted: not in the copy"),
    # extract
    "EX001": (Severity.INFO, "Intact checkpoint extracted with its companion files"),
    "EX002": (Severity.WARNING, "Checkpoint left behind: not intact"),
    "EX003": (Severity.ERROR, "Extracted copy does not hash like its source"),
}
