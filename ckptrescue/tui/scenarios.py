"""What happened -> which shipped playbook the kit proposes (pure data, no Textual).

The guided flow starts here: the responder says what kind of incident this is, the TUI proposes
the playbook and says which evidence it will ask for. Any shipped playbook can still be chosen.
"""

from __future__ import annotations

from dataclasses import dataclass

from ckptrescue.engine.argtypes import ARG_TYPES


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    hint: str
    playbook: str


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("disk", "Disk or node failure",
             "A failing disk or a node that died mid-checkpoint: image the device with ddrescue "
             "onto other media, mount the image read-only, probe, rank, locate bad sectors.",
             "full-incident"),
    Scenario("checkpoint", "Corrupted checkpoint",
             "A run will not resume or a checkpoint fails to load: verify every checkpoint "
             "without executing it, rank the run, salvage intact tensors.",
             "probe-checkpoints"),
    Scenario("s3", "S3 mismatch",
             "An object store returned a checkpoint that does not match what was written: "
             "compare local files with the objects' server-side checksums.",
             "verify-s3-prefix"),
    Scenario("silent", "Silent training failure",
             "Loss is garbage or a fine-tune plateaus: numeric health of every tensor (NaN/Inf, "
             "exponent flips, zero pages) and which checkpoint is safe to resume from.",
             "probe-checkpoints"),
    Scenario("dataset", "Dataset corruption",
             "Training data may be rotting: audit against a SHA-256 manifest, check container "
             "CRCs, recover damaged files from versioned backups.",
             "dataset-audit"),
    Scenario("preserve", "Preserve a mounted filesystem",
             "The volume is still mounted: copy it read-only with a manifest and a verify pass "
             "before anything else.", "preserve-mounted-fs"),
    Scenario("triage", "Not sure yet: triage",
             "Who is writing to the volume, what the kernel log says, what to freeze first.",
             "triage"),
    Scenario("resume", "Files verify but the run will not resume",
             "torch.load refuses globals, load_state_dict reports missing keys, rank files are "
             "missing or scattered, the world size changed, a replica differs: the exact "
             "safe-globals list, the key mapping, a reassembly plan, how to load at N ranks.",
             "resume-checks"),
    Scenario("hub", "A Hugging Face model will not load offline",
             "Verify the hub cache without the network: every blob against its name, every "
             "snapshot link; the revision each problem breaks.", "hub-cache"),
)

# Parameter types whose value is evidence, with what the picker offers (engine/argtypes.py)
EVIDENCE_TYPES = {name: t.picker for name, t in ARG_TYPES.items() if t.picker}

