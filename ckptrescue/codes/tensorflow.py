"""Codes emitted by the TensorFlow / Keras checkpoint formats.

Prefixes: ``SS`` SSTable (``.index``), ``TB`` TensorBundle, ``TC`` ``checkpoint`` state file,
``SD`` SavedModel, ``KR`` Keras ``.keras``, ``H5`` HDF5 weights files.
"""

from ckptrescue.model import Severity

CODES = {
    "SS001": (Severity.CRITICAL, "The .index has no SSTable footer (truncated or overwritten tail)"),
    "SS002": (Severity.ERROR, "An .index block fails its CRC32C; its entries are untrusted"),
    "SS003": (Severity.ERROR, "An .index block handle or block layout is malformed"),
    "SS004": (Severity.WARNING, "Entries recovered from the .index by scanning for block trailers"),
    "SS005": (Severity.ERROR, "An .index block uses an unsupported compression type"),
    "SS006": (Severity.ERROR, "Bytes of the .index where no block could be recovered"),
    "TB001": (Severity.CRITICAL, "Data shards present but the .index is missing (interrupted save)"),
    "TB002": (Severity.ERROR, "A tensor's bytes do not match its CRC32C"),
    "TB003": (Severity.CRITICAL, "A data shard is missing"),
    "TB004": (Severity.ERROR, "A data shard is shorter than its entries require (truncated)"),
    "TB005": (Severity.ERROR, "The bundle header entry is missing or undecodable"),
    "TB006": (Severity.ERROR, "A BundleEntryProto is undecodable"),
    "TB007": (Severity.WARNING, "A data shard has bytes no entry accounts for, or is not expected"),
    "TB008": (Severity.WARNING, "Leftovers of an interrupted save (_temp folder, .tempstate file)"),
    "TB009": (Severity.WARNING, "A tensor's entry came from a damaged .index block"),
    "TB010": (Severity.WARNING, "A tensor cannot be verified (no CRC, unsupported dtype, too big)"),
    "TB011": (Severity.ERROR, "An entry's size disagrees with its dtype and shape"),
    "TB012": (Severity.WARNING, "The bundle is big-endian or of an unknown version"),
    "TB013": (Severity.ERROR, "A sliced variable's slices are missing or do not cover it"),
    "TB014": (Severity.ERROR, "The header's shard count disagrees with the shard files"),
    "TB015": (Severity.ERROR, "A slice entry contradicts its variable (dtype, shape, extent); "
              "TensorFlow's reader aborts the process on it"),
    "TC001": (Severity.ERROR, "The checkpoint state file names a prefix that does not exist"),
    "TC002": (Severity.WARNING, "The checkpoint state file cannot be parsed"),
    "TC003": (Severity.WARNING, "The checkpoint state file's timestamps are not increasing"),
    "TC004": (Severity.ERROR, "The state file names absolute paths elsewhere (a moved run): "
              "TensorFlow will not find the latest checkpoint"),
    "SD001": (Severity.ERROR, "SavedModel: saved_model.pb is missing"),
    "SD002": (Severity.ERROR, "SavedModel: fingerprint checkpoint_hash does not match variables.index"),
    "SD003": (Severity.WARNING, "SavedModel: fingerprint.pb missing or undecodable"),
    "SD004": (Severity.ERROR, "SavedModel: the variables/ checkpoint is missing"),
    "SD005": (Severity.ERROR, "SavedModel: saved_model.pb does not decode as a SavedModel proto"),
    "KR001": (Severity.ERROR, "A .keras zip member fails its CRC-32"),
    "KR002": (Severity.ERROR, "The .keras zip structure is damaged"),
    "KR003": (Severity.ERROR, "The .keras archive has no weights member"),
    "KR004": (Severity.WARNING, "A .keras weights member is compressed: no per-tensor offsets"),
    "KR005": (Severity.CRITICAL, "A shard named by a Keras sharded-weights JSON is missing"),
    "KR006": (Severity.ERROR, "A Keras weights shard lacks variable groups its JSON maps to it"),
    "H5001": (Severity.INFO, "HDF5 stores no checksums: only structure and numerics are checked"),
    "H5002": (Severity.ERROR, "The HDF5 file cannot be opened or walked"),
    "H5003": (Severity.ERROR, "An HDF5 dataset cannot be read"),
    "H5004": (Severity.WARNING, "An HDF5 dataset is chunked or compressed: no contiguous offset"),
    "H5005": (Severity.ERROR, "An HDF5 dataset extends past the end of the file (truncated)"),
    "H5006": (Severity.ERROR, "A truncated HDF5 file whose datasets cannot be named (the group "
              "structure lay past the cut)"),
}
