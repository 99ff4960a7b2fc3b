"""Codes emitted by the checkpoint probes (torch zip, legacy, pickle, safetensors, HF, DCP,
numerics, reference comparison, sandboxed load, salvage)."""

from ckptrescue.model import Severity

E, W, C = Severity.ERROR, Severity.WARNING, Severity.CRITICAL
I = Severity.INFO  # noqa: E741

CODES = {
    # torch.save zip archives
    "TZ001": (E, "Zip central directory missing (truncated or damaged tail); local headers walked"),
    "TZ002": (E, "Storage record CRC-32 mismatch: the bytes changed after they were written"),
    "TZ003": (W, "CRC-32 not recorded (0): record payloads cannot be verified"),
    "TZ004": (E, "Record size differs from the size the pickle declares (numel x itemsize)"),
    "TZ005": (E, "Storage record referenced by the pickle is missing from the archive"),
    "TZ006": (E, "Record truncated: its data runs past the end of the file"),
    "TZ007": (E, "Local header damaged or missing (torch.load fails reading this record)"),
    "TZ008": (W, ".data/serialization_id does not match the records' CRCs"),
    "TZ009": (E, "data.pkl missing or unreadable: tensor names cannot be recovered"),
    "TZ010": (I, "Archive records not referenced by the pickle"),
    "TZ011": (E, "Central directory damaged or inconsistent"),
    "TZ012": (E, "Metadata record (version/byteorder/...) damaged or missing"),
    "TZ020": (E, "Not a checkpoint: empty, Git-LFS pointer, HTML or unknown bytes"),
    "IO001": (E, "Bytes of a checkpoint file are unreadable (I/O error): tensors there are lost"),
    "IO002": (E, "Not a regular file (FIFO, device, socket) where a checkpoint file belongs: "
                 "never opened"),
    # torch legacy (pre-1.6) stream
    "TL001": (E, "Legacy checkpoint truncated: storages cut short"),
    "TL002": (E, "Legacy storage element count disagrees with the pickle"),
    "TL003": (I, "Legacy format stores no checksums: payloads verified numerically only"),
    "TL004": (E, "Legacy header pickles damaged (magic, protocol or sys_info)"),
    "TL005": (W, "Bytes after the last legacy storage"),
    # tar archives holding checkpoints (formats/tar_archive.py)
    "TA001": (E, "Tar member header damaged (checksum, size field) or a zero block hiding later "
                 "members: the members after it cannot be located"),
    "TA002": (E, "Tar archive cut: a member or the end-of-archive blocks are missing"),
    "TA003": (E, "Compressed tar stream damaged: gzip CRC-32 / length or zstd checksum fails"),
    "TA004": (E, "A checkpoint member of the tar archive is not intact (its own findings say how)"),
    "TA005": (E, "Tar archive holds no checkpoint member (torch zip or pickle)"),
    "ZA001": (E, "A checkpoint member of a plain zip archive is not intact (its own findings say "
              "how)"),
    "ZA002": (W, "Two zip members share a name: extraction keeps the last, so the earlier one "
              "is not what a loader reads (still judged for safety)"),
    "ZA003": (E, "A checkpoint member of a zip archive is compressed with a method the kit does "
              "not read: neither its bytes nor its pickle are verified"),
    "ZA004": (E, "A deflated zip member does not inflate to its recorded size and CRC-32"),
    "ZA005": (E, "An extractor would refuse a checkpoint member of the zip, or read it elsewhere "
                 "(directory, local header, version, flags or stored CRC-32)"),
    "TA006": (W, "Two tar members share a name: extraction keeps the last, so the earlier one "
              "is not what a loader reads (still judged for safety)"),
    # pickle inspection
    "PK001": (C, "Pickle references globals outside torch's weights-only allowlist"),
    "PK002": (E, "Pickle damaged: static parse stopped"),
    "PK003": (W, "Persistent id is not a torch storage reference"),
    "PK004": (E, "Pickle read without weights_only names a global one edit from the exact "
                 "list: a damaged name the unpickler cannot resolve"),
    "PK005": (C, "Pickle opcode overruns its FRAME: unpicklers read different opcodes"),
    "PK006": (E, "Pickle scan limit hit (nesting, object count or size): not verified"),
    "PK007": (E, "Pickle uses opcodes torch.load(weights_only=True) refuses"),
    "PK009": (E, "Legacy torch stream structure the loader refuses (magic, protocol, "
                 "persistent ids or storage keys)"),
    "PK011": (E, "torch's loader refuses the pickle by its own rules (rebuild arguments, BUILD "
                 "targets, containers, persistent ids): the file does not load"),
    "PK012": (W, "One storage referenced with two types: torch caches the first and loads every "
                 "tensor on it as that type"),
    "PK010": (C, "Pickle rewrites a module's or class's attributes (BUILD on a global): later "
                 "globals resolve to what it wrote"),
    # safetensors
    "ST001": (E, "safetensors header length invalid (too small, too large or past EOF)"),
    "ST002": (E, "safetensors header is not valid UTF-8 JSON of tensor entries"),
    "ST003": (E, "safetensors entry with an unknown dtype or malformed fields"),
    "ST004": (E, "safetensors entry whose shape x dtype differs from its byte extent"),
    "ST005": (E, "safetensors entries overlap"),
    "ST006": (E, "safetensors buffer has holes between entries"),
    "ST007": (E, "safetensors file shorter than its header declares (truncated)"),
    "ST008": (E, "safetensors file has bytes after the last entry (loaders reject it)"),
    "ST009": (I, "safetensors stores no checksums: payloads verified numerically only"),
    "ST010": (E, "safetensors header JSON nested deeper than the loader accepts (128 levels)"),
    "ST011": (E, "safetensors __metadata__ is not a map of strings to strings (loader refuses)"),
    # Hugging Face sharded checkpoints
    "HF001": (E, "Shard listed in the index is missing"),
    "HF002": (E, "Tensor listed in the weight map is missing from its shard"),
    "HF003": (W, "Tensor present in a shard but absent from the weight map (stale index)"),
    "HF004": (W, "Tensor present in more than one shard"),
    "HF005": (E, "Shard index JSON unreadable"),
    "HF006": (E, "Sharded checkpoint without its index file"),
    "HF007": (W, "Shard numbering (-of-N) or index total_size inconsistent"),
    "HF008": (W, "Weight map puts tensors in the wrong shard (stale index): bytes present elsewhere"),
    "HF009": (E, "Weight map names shard files outside the index's directory"),
    # torch.distributed.checkpoint
    "DC001": (E, "DCP .metadata missing: the save never finished"),
    "DC002": (E, "DCP .metadata unreadable"),
    "DC003": (E, "DCP data file referenced by .metadata is missing"),
    "DC004": (E, "DCP data file shorter than the items it must hold"),
    "DC005": (E, "DCP chunks do not tile the tensor exactly"),
    "DC006": (W, "DCP data file not referenced by .metadata (orphan)"),
    "DC007": (E, "DCP item damaged (nested zip structure or CRC)"),
    "DC008": (E, "DCP .metadata parses but torch's load would fail on it (a field, key, planner "
                 "path or type the loader needs is wrong)"),
    # numerics
    "NM001": (W, "NaN/Inf values"),
    "NM002": (W, "Exponent outlier (high exponent-bit flip signature)"),
    "NM003": (W, "Zero-filled 4 KiB pages (torn write signature)"),
    "NM004": (W, "Adam exp_avg_sq has negative values"),
    "NM005": (W, "BatchNorm running_var has values <= 0"),
    "NM006": (W, "num_batches_tracked is negative"),
    "NM007": (I, "Numeric scan skipped for some tensors (dtype not supported)"),
    # reference comparison
    "RF001": (W, "Tensor of the reference is missing"),
    "RF002": (I, "Tensor not in the reference (added)"),
    "RF003": (W, "Tensor shape or dtype differs from the reference"),
    "RF004": (E, "Tensor differs from the reference in only a few elements (bit flip?)"),
    "RF005": (W, "Reference checkpoint could not be compared"),
    # sandboxed load
    "LD001": (I, "Sandboxed real load succeeded"),
    "LD002": (E, "Sandboxed real load raised an exception"),
    "LD003": (E, "Sandboxed loader crashed, was killed (OOM) or timed out"),
    "LD004": (I, "Real load skipped: the structural verdict does not allow it"),
    "LD005": (C, "Sandbox blocked the loader: the file made it try to run a program, open the "
                 "network, write outside scratch or resolve a forbidden global"),
    "LD006": (W, "Sandbox unavailable (bubblewrap missing, no namespaces, or no room for its "
                 "scratch directory): load not run"),
    "LD007": (E, "The real loader refuses a file the static checks found loadable"),
    "LD008": (E, "The real loader's tensors differ from the static map (dtype, shape or bytes)"),
    # salvage
    "SV001": (I, "Tensors salvaged into a new safetensors file"),
    "SV002": (W, "Tensors that could not be salvaged"),
    "SV003": (W, "Tensors filled from a reference checkpoint"),
    "SV004": (W, "Salvaged tensors that are numerically suspect in the probe: written, flagged, "
                 "not counted as clean recoveries"),
    "SV005": (E, "Salvage recovered no tensor (nothing could be named or verified)"),
}
