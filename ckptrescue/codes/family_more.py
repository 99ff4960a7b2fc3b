"""Codes emitted for the FSDP/DCP, Lightning, Accelerate and Orbax families
(``ckptrescue/checkpoints/families/{fsdp,lightning,accelerate,orbax}.py``): FM050-FM099. The generic codes
(a missing rank FM001, a rank from another step FM002, disagreeing optimizer counters FM004, a
torn rank file FM007, pointers FM020-FM023) are in ``codes/family.py``.

``VERDICT`` maps a code to the step verdict it gives when a family emits it (absent: no change).
"""

from ckptrescue.model import Severity

E, W, C = Severity.ERROR, Severity.WARNING, Severity.CRITICAL
I = Severity.INFO  # noqa: E741

CODES = {
    # FSDP / torchtitan (DCP sharded state dicts, full and local variants)
    "FM050": (E, "DCP data file of a rank named in the save plan is missing"),
    "FM051": (I, "Ranks below the plan's highest rank wrote no data file (replicated-only "
                 "ranks?)"),
    "FM052": (E, "A rank's DCP items are unreadable (torn or damaged data file)"),
    "FM053": (E, "DCP step directory has no .metadata: the save never finished (uncommitted)"),
    "FM054": (E, "Local (per-rank) state-dict file records another rank or world size than "
                 "its name and siblings"),
    # PyTorch Lightning
    "FM060": (E, "Lightning checkpoint lacks keys its loader needs to resume (state_dict, "
                 "optimizer_states, loops, global_step, epoch)"),
    "FM061": (E, "Lightning global_step disagrees with its loops or scheduler counters"),
    "FM062": (I, "Lightning callback sentinels (ModelCheckpoint kth_value/best scores = inf) "
                 "are not numeric damage"),
    "FM063": (E, "Lightning FSDP-strategy checkpoint directory lacks meta.pt or its DCP "
                 "part"),
    "FM064": (E, "last.ckpt is a symlink to a checkpoint that does not exist"),
    # Hugging Face Accelerate
    "FM070": (E, "Accelerate checkpoint lacks its model weights or optimizer state"),
    "FM071": (E, "Accelerate optimizer and scheduler come from different steps (learning "
                 "rates disagree)"),
    "FM072": (W, "Accelerate world size inferred (scheduler steps per optimizer step, sibling "
                 "checkpoints): Accelerate records none"),
    "FM073": (E, "Accelerate optimizer driven by an LR scheduler (initial_lr) but no "
                 "scheduler.bin in a step without sibling steps to compare with"),
    # Orbax (JAX)
    "FM080": (E, "Orbax step directory is temporary (*.orbax-checkpoint-tmp*): written but "
                 "never committed; never resumable"),
    "FM081": (E, "Orbax step or item metadata (_CHECKPOINT_METADATA, _METADATA) missing or "
                 "unreadable"),
    "FM082": (E, "Orbax OCDBT manifest missing or unreadable"),
    "FM083": (E, "Orbax array named in the item metadata cannot be read (data file missing "
                 "or damaged)"),
    "FM084": (W, "tensorstore is not installed: Orbax arrays not verified (install the orbax "
                 "extra)"),
    "FM085": (E, "Orbax step has no commit marker (commit_success.txt / commit timestamp)"),
    "FM086": (E, "Orbax item directory named in _CHECKPOINT_METADATA is missing"),
}

VERDICT = {
    "FM050": "incomplete", "FM052": "damaged", "FM053": "incomplete", "FM054": "damaged",
    "FM060": "incomplete", "FM061": "damaged", "FM063": "incomplete", "FM064": "incomplete",
    "FM070": "incomplete", "FM071": "damaged", "FM073": "incomplete",
    "FM080": "incomplete", "FM081": "incomplete", "FM082": "incomplete", "FM083": "damaged",
    "FM085": "incomplete", "FM086": "incomplete",
}
