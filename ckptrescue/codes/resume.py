"""Codes of the questions asked at resume time that no loader answers (issue #31): SG the exact
``add_safe_globals`` list; KM key mismatches at resume; RA scattered and half-written ranks; WS
another world size; RP replicas against the persistent copy."""

from ckptrescue.model import Severity

E, W, C = Severity.ERROR, Severity.WARNING, Severity.CRITICAL
I = Severity.INFO  # noqa: E741

CODES = {
    "SG001": (I, "torch.load(weights_only=True) needs globals beyond its defaults, all on the "
                 "kit's exact lists: registering them (the printed list) lets it load"),
    "SG002": (W, "torch.load(weights_only=True) needs globals on no exact list: registering "
                 "them imports and runs that code; the kit cannot vouch for them"),
    "SG003": (C, "The file names globals that must never be registered (they run programs, code "
                 "or I/O, or torch blocks their module)"),
    "SG004": (E, "torch.load(weights_only=True) refuses the file for reasons no add_safe_globals "
                 "fixes (unsupported opcodes, a damaged pickle, a damaged file)"),
    "SG005": (I, "Not a file torch.load reads (or not readable): no globals list"),
    "KM001": (I, "The checkpoint's tensor names match the names the model expects"),
    "KM002": (W, "The names do not load as saved; the causes found (DDP module., torch.compile "
                 "_orig_mod., a container, a renamed layer, tied weights saved once) and the "
                 "printed mapping fix them"),
    "KM003": (E, "No renaming makes the checkpoint load into the model (FSDP flat parameters, "
                 "shapes that differ, names nowhere in the checkpoint)"),
    "RA001": (W, "A step lacks rank files (or holds damaged ones) and can be reassembled from "
                 "verified copies elsewhere: the plan names each file"),
    "RA002": (E, "A step lacks rank files and cannot be reassembled: no verified copy of some, "
                 "or the assembled set fails the family's cross-rank checks"),
    "RA003": (I, "A candidate copy of a rank file was rejected (damaged, another step, another "
                 "run, a symlink, not a regular file)"),
    "WS001": (I, "The step loads at the world size asked about (as saved, or its format "
                 "reshards)"),
    "WS002": (W, "The step loads at that world size only after a conversion (DeepSpeed "
                 "ds_to_universal, Megatron's converter): the command and the files it needs"),
    "WS003": (E, "The step does not load at that world size, or is not verified"),
    "RP001": (E, "A replica of a rank file differs from the persistent copy (tensors named by "
                 "name, dtype, shape and CRC): do not resume from it"),
    "RP002": (E, "A replica of a rank file is damaged or unreadable"),
    "RP003": (W, "The persistent copy of a rank file is damaged: resume it from the named "
                 "replica (error when no replica can stand in)"),
    "RP004": (I, "A replica holds a file the persistent copy does not"),
}
