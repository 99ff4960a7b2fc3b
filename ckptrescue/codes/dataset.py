"""Codes emitted by the dataset tools: MF manifest build/audit, DS dataset verify, RC recover."""

from ckptrescue.model import Severity

CODES = {
    "MF001": (Severity.ERROR, "A file is corrupted: same size as in the manifest, different SHA-256"),
    "MF002": (Severity.WARNING, "A file changed: its size (or, in a quick audit, mtime) differs"),
    "MF003": (Severity.ERROR, "A file listed in the manifest is missing"),
    "MF004": (Severity.INFO, "A file is not in the manifest (new)"),
    "MF005": (Severity.ERROR, "A file is unreadable (I/O error at the given offset)"),
    "MF006": (Severity.INFO, "An entry was skipped: symlink out of the directory, dangling, "
                             "to a directory, or a FIFO/socket/device"),
    "MF007": (Severity.INFO, "Quick audit: only sizes and mtimes were compared"),
    "MF008": (Severity.WARNING, "A file changed while it was hashed (size, mtime or inode "
                                "differ before and after the read): hashed again"),
    "DS001": (Severity.ERROR, "TFRecord: a record's length or data CRC32C fails, or it is "
                              "truncated"),
    "DS002": (Severity.ERROR, "Tar/WebDataset shard: a bad header checksum or a truncated member"),
    "DS003": (Severity.ERROR, "Parquet: footer/metadata damaged or a column chunk does not decode"),
    "DS004": (Severity.ERROR, "JSON lines: a line does not parse"),
    "DS005": (Severity.ERROR, ".npy/.npz: the header does not match the data size, or a member "
                              "fails its CRC"),
    "DS006": (Severity.ERROR, "A dataset file is unreadable (I/O error at the given offset)"),
    "DS007": (Severity.ERROR, "A dataset file is damaged (other format)"),
    "DS008": (Severity.WARNING, "A file of a checked format could not be checked (or only in "
                                "part): the reason is given"),
    "DS009": (Severity.WARNING, "Decompression stopped at the ratio or size limit (a "
                                "decompression bomb?): the rest of the file is not checked"),
    "DS010": (Severity.ERROR, "Arrow IPC file or stream damaged (framing, buffers, footer, or a "
                              "record batch that does not decode)"),
    "DS011": (Severity.ERROR, "Megatron indexed dataset damaged (.idx header/counts/pointers, "
                              ".bin length, a missing partner)"),
    "DS012": (Severity.ERROR, "MosaicML MDS shard or index damaged (missing shard, size, hash, "
                              "offset table, sample layout)"),
    "DS013": (Severity.ERROR, "Hugging Face datasets folder inconsistent (missing Arrow file, "
                              "damaged JSON, row counts)"),
    "RC001": (Severity.INFO, "A damaged or missing file was recovered from a backup version and "
                             "verified"),
    "RC002": (Severity.ERROR, "A damaged or missing file could not be recovered: no backup "
                              "version matches the manifest"),
    "RC003": (Severity.INFO, "A swap-back plan was written: verified replacements and a script "
                             "for the operator to apply (the kit never writes in place)"),
    "MD001": (Severity.WARNING, "Manifest diff: entries whose SHA-256 changed between OLD and "
                                "NEW"),
    "MD002": (Severity.WARNING, "Manifest diff: entries in OLD only (removed)"),
    "MD003": (Severity.INFO, "Manifest diff: entries in NEW only (added)"),
    "MD004": (Severity.INFO, "Manifest diff: entries renamed (the same SHA-256 under a new path)"),
    "MD005": (Severity.ERROR, "Manifest diff: lines not in sha256sum format (torn or foreign): "
                              "their entries are not compared"),
    "MD006": (Severity.WARNING, "Manifest diff: a name listed twice with different hashes (the "
                                "last line is compared)"),
}
