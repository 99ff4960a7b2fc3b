"""Codes emitted for multi-rank checkpoint families (``ckptrescue/checkpoints/families/``): the generic
completeness and cross-rank rules, run-level pointers, DeepSpeed and Megatron-LM / NeMo.
FM050-FM099 (FSDP/DCP, Lightning, Accelerate, Orbax) live in ``codes/family_more.py``.

``VERDICT`` maps a code to the step verdict it gives when a family emits it (codes absent from
it do not change the verdict): a missing rank makes the step ``incomplete``, a rank from another
step or a disagreeing shard ``damaged``. Pointer codes never change a step's verdict (the steps
are what they are; the pointer is wrong).
"""

from ckptrescue.model import Severity

E, W, C = Severity.ERROR, Severity.WARNING, Severity.CRITICAL
I = Severity.INFO  # noqa: E741

CODES = {
    # generic: completeness and cross-rank consistency
    "FM001": (E, "Rank file missing: the family's own metadata or naming says it must exist"),
    "FM002": (E, "Rank file records another step/iteration than its step (mixed in from "
                 "another step)"),
    "FM003": (E, "Ranks disagree on run-level metadata (world size, parallel sizes, config): "
                 "a rank file from another run"),
    "FM004": (E, "Optimizer step counters or scheduler state disagree across ranks"),
    "FM005": (E, "Tensor-parallel shards of one parameter disagree on shape/dtype or split size"),
    "FM006": (E, "A tensor the format replicates across ranks differs between ranks (CRC-32)"),
    "FM007": (E, "A rank file is torn, damaged or unreadable: the step cannot resume"),
    "FM008": (W, "Step metadata unreadable: world size unknown, completeness checked by "
                 "naming only"),
    "FM009": (E, "Step directory holds none of the family's rank files"),
    "FM010": (W, "Rank files beyond the recorded world size (leftovers of another run?)"),
    "FM011": (W, "A rank file names globals the family allows but its own probe could not "
                 "read the step counter"),
    "FM012": (W, "DeepSpeed pipeline layer index absent on every model-parallel rank (a "
                 "parameter-less layer, or every file of that layer lost)"),
    # run-level pointers (never written by the kit: the finding spells out the fix)
    "FM020": (E, "Newest-step pointer names a step that does not exist"),
    "FM021": (E, "Newest-step pointer names an incomplete or damaged step"),
    "FM022": (W, "Newest-step pointer names an older step than the newest complete one"),
    "FM023": (E, "Newest-step pointer unreadable or not a step name"),
    # DeepSpeed
    "FM030": (E, "DeepSpeed model-states file missing for a model-parallel rank"),
    "FM031": (E, "DeepSpeed ZeRO partition count disagrees with the optimizer-state files "
                 "present"),
    "FM032": (E, "DeepSpeed optimizer-state file names a ZeRO stage or dp size other than the "
                 "step's"),
    "FM033": (E, "DeepSpeed rank files beyond dp x mp, or a second set of optimizer files: "
                 "DeepSpeed's consolidation counts them and refuses the step"),
    "FM034": (E, "DeepSpeed optimizer partition is not the rank its file name claims (fragment "
                 "mapping, partition size or fp32 master weights fit another rank)"),
    # Megatron-LM / NeMo
    "FM040": (E, "Megatron iteration missing mp_rank directories for its TP x PP sizes"),
    "FM041": (E, "Megatron saved args disagree with the directory layout (TP/PP sizes)"),
    "FM042": (E, "Megatron torch_dist step missing metadata.json, common.pt or .metadata"),
    "FM043": (E, "NeMo archive missing model_config.yaml or its weights"),
    "FM044": (E, "NeMo archive damaged: tar member headers or sizes wrong"),
    "FM045": (W, "Megatron checkpoint_version or args unreadable: layout checked by naming only"),
    "FM048": (E, "Megatron rank file holds another rank's model: embedding, final norm, "
                 "parameter names or saved rank of another pipeline stage than its directory"),
    "FM046": (I, "NeMo archive gzip-compressed (NeMo < 1.7): verified by the gzip CRC-32, "
                 "tensors have no in-place offsets"),
    "FM047": (I, "NeMo archive holds a distributed checkpoint (model_weights/): its .distcp "
                 "items are checked by presence and size, not CRC in place"),
}

VERDICT = {
    "FM001": "incomplete", "FM002": "damaged", "FM003": "damaged", "FM004": "damaged",
    "FM005": "damaged", "FM006": "damaged", "FM007": "damaged", "FM009": "incomplete",
    "FM030": "incomplete", "FM031": "incomplete", "FM032": "damaged", "FM033": "damaged", "FM034": "damaged",
    "FM040": "incomplete",
    "FM041": "damaged", "FM042": "incomplete", "FM043": "incomplete", "FM044": "damaged",
    "FM048": "damaged",
}
