"""The checkpoint wing"s step outputs: what probe, salvage and rank record, typed all the way
down (a checkpoint, its findings, a salvaged file, a ranked step) so that the renderers, the
answer and the report read fields, never ``c["key"]``. ``to_json`` gives the stored JSON back
(the same keys in the same order); ``docs/step-outputs.md`` is generated from these classes."""

from __future__ import annotations

from dataclasses import dataclass, field

from ckptrescue.model import JsonObject, JsonRecord, StepOutputs, answer_field, doc_field

NOT_INTACT_KINDS = ("damaged", "missing", "suspect")  # the tensor lists of a checkpoint


@dataclass
class CheckpointFinding(JsonRecord):
    """A finding as a probe result lists it (``model.Finding``"s JSON without its source)."""

    code: str = ""
    severity: str = "info"
    title: str = ""
    offset: int | None = None
    length: int | None = None
    tensors: list[str] = field(default_factory=list)
    evidence: str | None = None
    details: JsonObject = field(default_factory=dict)


@dataclass
class TensorEntry(JsonRecord):
    """One tensor of a checkpoint (``probe --tensors``): where its bytes are and their status."""

    name: str = ""
    dtype: str | None = None
    shape: list[int] | None = None
    file: str | None = None
    offset: int | None = None
    length: int | None = None
    storage: str | None = None
    status: str = ""
    checksum: str | None = None
    reasons: list[str] = field(default_factory=list)


@dataclass
class CheckpointSummary(JsonRecord):
    """One probed checkpoint."""

    path: str = doc_field("", "The checkpoint (a file, or a directory's index/metadata file).")
    format: str = doc_field("", "Its format (torch-zip, safetensors, tf-bundle, ...).")
    verdict: str = doc_field("", "intact, suspect, damaged, truncated, incomplete, unsafe, unreadable.")
    tensors_total: int = doc_field(0, "Tensors it holds.")
    damaged_tensors: list[str] = doc_field([], "Tensors whose bytes fail their check.")
    suspect_tensors: list[str] = doc_field([],
        "Tensors whose values look corrupted (NaN/Inf, flipped exponents, zero pages).")
    missing_tensors: list[str] = doc_field([], "Tensors its index names but no file holds.")
    findings: list[CheckpointFinding] = doc_field([], "What the probe found.")
    load: JsonObject | None = doc_field(None, "With --load: the sandboxed real load's outcome (status, ...).")
    tensors: list[TensorEntry] | None = doc_field(None,
        "With --tensors: every tensor with its location and status.")

    def tensors_of(self, kind: str) -> list[str]:
        """The names of its ``kind`` tensors (one of :data:`NOT_INTACT_KINDS`)."""
        return list({"damaged": self.damaged_tensors, "missing": self.missing_tensors,
                     "suspect": self.suspect_tensors}[kind] or [])

    @property
    def not_intact_tensors(self) -> list[str]:
        return [n for kind in NOT_INTACT_KINDS for n in self.tensors_of(kind)]


@dataclass
class ProbeOutput(StepOutputs):
    """What the ``probe`` step records (each field: docs/step-outputs.md)."""

    checkpoints: list[CheckpointSummary] = doc_field([],
        "One record per checkpoint: path, format, verdict, tensors_total, damaged_tensors, "
        "suspect_tensors, missing_tensors, findings (code, severity, title, offset, length, "
        "tensors, evidence, details), load (with --load), tensors (with --tensors).")


@dataclass
class LostTensor(JsonRecord):
    """A tensor the salvage did not recover, and why."""

    name: str = ""
    reason: str = ""


@dataclass
class SuspectTensor(JsonRecord):
    """A tensor the salvage recovered but the numeric scan flagged, and why."""

    name: str = ""
    reasons: list[str] = field(default_factory=list)


@dataclass
class SalvageRecord(JsonRecord):
    """One salvaged checkpoint (``salvage.json``"s shape, plus the ``checkpoint`` the step
    names)."""

    checkpoint: str = doc_field("", "The checkpoint the step salvaged (as named to the step).")
    source: str = doc_field("", "The file read.")
    source_verdict: str = doc_field("", "Its probe verdict.")
    output: str | None = doc_field(None, "The salvaged file written.")
    recovered: list[str] = doc_field([], "Tensors written, verified.")
    lost: list[LostTensor] = doc_field([], "Tensors not recovered, with why.")
    filled: list[str] = doc_field([], "Tensors taken from fill_from (a mixed result).")
    fill_from: str | None = doc_field(None, "The reference checkpoint lost tensors were taken from.")
    structure_from: str | None = doc_field(None, "Where the key structure came from.")
    suspect: list[SuspectTensor] = doc_field([], "Tensors numerically suspect, with why (written apart).")
    suspect_output: str | None = doc_field(None, "The file the suspect tensors went to.")
    unaccounted: str | None = doc_field(None, "A loss no tensor name stands for.")
    not_storable: list[dict[str, str]] = doc_field([], "Verified tensors safetensors cannot hold (not lost).")
    mixed: bool = doc_field(False, "Some tensors came from fill_from.")
    sources: dict[str, list[str]] = doc_field({}, "Which tensors came from which checkpoint.")
    torch_save_output: str | None = doc_field(None, "With --torch-save: the torch.save file written.")
    clean: bool = doc_field(False, "Every tensor came back verified from the checkpoint itself.")

    @property
    def name(self) -> str:
        """The checkpoint it salvaged (``?`` when the record does not say)."""
        return self.checkpoint or "?"


@dataclass
class SalvageFailure(JsonRecord):
    """A checkpoint whose salvage failed, and the error."""

    checkpoint: str = ""
    error: str = ""


@dataclass
class SalvageOutput(StepOutputs):
    """What the ``salvage`` step records (each field: docs/step-outputs.md)."""

    salvaged: list[SalvageRecord] = doc_field([],
        "One record per salvaged checkpoint: checkpoint, source, source_verdict, output, "
        "recovered, lost (name, reason), filled, fill_from, structure_from, suspect (name, "
        "reasons), suspect_output, unaccounted, clean.")
    failed: list[SalvageFailure] = doc_field([], "Checkpoints whose salvage failed: checkpoint, error.")

    @staticmethod
    def public_record(record: SalvageRecord) -> JsonObject:
        """``salvage --json``: one record without the ``checkpoint`` key the step adds."""
        return {k: v for k, v in record.to_json().items() if k != "checkpoint"}


@dataclass
class RankedCheckpoint(JsonRecord):
    """One checkpoint of a ranked run; a multi-rank family step also names its step, family
    and the ranks that fail."""

    path: str = doc_field("", "The checkpoint.")
    verdict: str = doc_field("", "Its verdict.")
    step: int | None = doc_field(None, "A multi-rank step: its step number.")
    family: str | None = doc_field(None, "A multi-rank step: its family.")
    bad_ranks: list[str] = doc_field([], "The rank files that fail (the first 64).")
    bad_ranks_total: int | None = doc_field(None, "How many fail.")

    @property
    def bad_ranks_count(self) -> int:
        return self.bad_ranks_total or len(self.bad_ranks)


@dataclass
class EvalRun(JsonRecord):
    """One run of the responder"s evaluation (``rank --eval``)."""

    path: str = ""
    status: str = ""
    metric: float | None = None
    reason: str | None = None


@dataclass
class PointerFix(JsonRecord):
    """The pointer file change a resume needs (the kit never writes it)."""

    pointer: str = ""
    current: str | None = None
    write: str = ""


@dataclass
class RankOutput(StepOutputs):
    """What the ``rank`` step records (each field: docs/step-outputs.md)."""

    checkpoints: list[RankedCheckpoint] = doc_field([], "Newest first: path, verdict.")
    resume_from: str | None = doc_field(None, "The newest checkpoint safe to resume from (None: none).")

    @property
    def evals(self) -> list[EvalRun]:
        """``rank --eval``: each evaluation run, in order (``eval`` in the stored JSON)."""
        return [EvalRun.from_json(e) for e in self.extra.get("eval") or []]

    @property
    def pointer_fix(self) -> PointerFix | None:
        fix = self.extra.get("pointer_fix")
        return PointerFix.from_json(fix) if fix else None


# ---- the resume checks ------------------------------------------------------------------

NO_TORCH_FILE = "no torch file under it"  # a folder's entry (weights_only_globals)


@dataclass
class SafeGlobalsOutput(StepOutputs):
    """What the ``resume.safe_globals`` step records (each field: docs/step-outputs.md)."""

    paths: list[str] = doc_field([], "The files or directories given.")
    files: list[JsonObject] = doc_field([],
        "Per torch file: path, format, verdict, globals_total, needed (global, status: safe, "
        "unlisted, dangerous or blocked; lists, source, reason), blockers (what no "
        "registration fixes), loads_with_safe_list, error (not a torch file).")
    safe: list[JsonObject] = doc_field([],
        "The globals safe to register, over every file: global, lists, source.")
    not_safe: list[JsonObject] = doc_field([], "The globals not to register: global, status, reason.")
    snippet: str = doc_field("",
        "Python registering the safe globals with torch.serialization.add_safe_globals.")
    snippet_lines: list[str] = doc_field([], "The same, one line per item (what the terminal shows).")
    answer: str = answer_field()

    @property
    def ok(self) -> bool:
        """Every torch file loads with weights_only=True once the safe list is registered, and
        every file given is one: a file that is no torch file or cannot be read is not one that
        loads (the exit said 0 for it). A folder holding no torch file needs nothing registered
        (a DCP step's shards are not torch.load files): that is no failure."""
        return bool(self.files) and all(
            f.get("loads_with_safe_list") if f.get("error") is None
            else f.get("error") == NO_TORCH_FILE for f in self.files)


@dataclass
class KeyMismatchOutput(StepOutputs):
    """What the ``resume.keys`` step records (each field: docs/step-outputs.md)."""

    checkpoint: str = doc_field("", "The checkpoint examined.")
    expected_from: str = doc_field("",
        "Where the model's names came from: a reference checkpoint, a key list or a model "
        "class (instantiated in the loader sandbox).")
    format: str = doc_field("", "The checkpoint's format.")
    verdict: str = doc_field("", "Its probe verdict.")
    checkpoint_keys: int = doc_field(0, "Tensor names in the checkpoint.")
    expected_keys: int = doc_field(0, "Names the model expects.")
    matched_before: int = doc_field(0, "Expected names found as saved.")
    matched_after: int = doc_field(0, "Expected names accounted for after the mapping (ties included).")
    resolved: bool = doc_field(False, "The mapping accounts for every expected name with its shape.")
    causes: list[str] = doc_field([],
        "The causes found, in order (container, module. from DDP, _orig_mod. from "
        "torch.compile, FSDP names and flat parameters, a renamed layer, tied weights).")
    rules: list[JsonObject] = doc_field([],
        "The rules: kind (container, strip, add, rename, tie, flat), cause, detail, fixes.")
    mapping: list[dict[str, str]] = doc_field([],
        "Per renamed name (up to 5,000): from (the checkpoint's), to (the model's).")
    mapping_total: int = doc_field(0, "Names the mapping renames.")
    tied: list[dict[str, str]] = doc_field([],
        "Names saved once: name (the model's), copy_of (the name present).")
    missing: list[str] = doc_field([], "Expected names still unaccounted for (up to 5,000).")
    missing_total: int = doc_field(0, "Their count.")
    unexpected: list[str] = doc_field([], "Names of the state dict the model does not use (up to 5,000).")
    unexpected_total: int = doc_field(0, "Their count.")
    outside: dict[str, int] = doc_field({},
        "Top-level entries of the checkpoint beside the state dict (optimizer, ...), with "
        "their tensor counts.")
    shape_mismatches: list[JsonObject] = doc_field([],
        "Names that map but whose shape differs: checkpoint, model, saved_shape, "
        "expected_shape.")
    flat_params: list[str] = doc_field([], "FSDP flat parameters (no renaming maps them).")
    snippet: str = doc_field("", "Python (fix_keys) applying the mapping to a loaded state dict.")
    snippet_lines: list[str] = doc_field([], "The same, one line per item (what the terminal shows).")
    answer: str = answer_field()

    @property
    def ok(self) -> bool:
        return self.matched_before == self.expected_keys and not self.unexpected_total


@dataclass
class ReassemblyOutput(StepOutputs):
    """What the ``resume.reassemble`` step records (each field: docs/step-outputs.md)."""

    step_dir: str = doc_field("", "The step directory examined.")
    family: str = doc_field("", "Its multi-rank family.")
    step: int | None = doc_field(None, "Its step or iteration.")
    world: dict[str, int] = doc_field({},
        "The world sizes the step's metadata (or a verified copy's) records.")
    candidates: list[str] = doc_field([],
        "The directories looked in (temporary/partial siblings, copies of the run).")
    ranks: list[JsonObject] = doc_field([],
        "Per expected rank file: rank, role, relpath, status (present, replaced, missing, "
        "damaged), source, sha256, size, tried (path, outcome).")
    needed: int = doc_field(0, "Rank files missing or damaged in the step.")
    reassemblable: bool = doc_field(False,
        "Every rank file is present or has a verified copy, and the set passes the family's "
        "cross-rank checks.")
    check_problems: list[str] = doc_field([], "What the family's cross-rank checks say of the assembled set.")
    plan_file: str | None = doc_field(None,
        "With --plan: the plan (JSON, schema ckptrescue.reassembly-plan/1).")
    plan_script: str | None = doc_field(None,
        "With --plan: the script beside it (copies into a new directory, then sha256sum -c).")
    dest: str | None = doc_field(None, "With --plan: the new directory the script builds.")
    answer: str = answer_field()

    @property
    def ok(self) -> bool:
        return not self.needed


@dataclass
class WorldSizeOutput(StepOutputs):
    """What the ``resume.world_size`` step records (each field: docs/step-outputs.md)."""

    step_dir: str = doc_field("", "The step examined.")
    ranks: int = doc_field(0, "The world size asked about.")
    family: str = doc_field("", "Its format or multi-rank family.")
    verdict: str = doc_field("", "Its probe verdict (only a verified step is "
                                                  "planned for).")
    step: int | None = doc_field(None, "Its step or iteration.")
    saved_world: JsonObject = doc_field({},
        "The world sizes the step records (dp, mp, zero_stage; tp, pp; processes).")
    loads: str = doc_field("", "as-saved, reshards, after-conversion, no, not-verified.")
    how: str = doc_field("", "Why, in one sentence.")
    commands: list[str] = doc_field([],
        "The conversion to run (ds_to_universal, Megatron's converter); the kit runs none.")
    files_needed: list[str] = doc_field([], "The step's files the conversion reads.")
    config: JsonObject = doc_field({},
        "Configuration the load then needs (DeepSpeed: checkpoint.load_universal).")
    notes: list[str] = doc_field([], "Notes.")
    answer: str = answer_field()

    @property
    def ok(self) -> bool:
        return self.loads in ("as-saved", "reshards")


@dataclass
class ReplicaOutput(StepOutputs):
    """What the ``resume.replicas`` step records (each field: docs/step-outputs.md)."""

    persistent: str = doc_field("", "The persistent copy of the step.")
    replicas: list[str] = doc_field([],
        "The replica directories compared (node-local copies, copies fetched from peers).")
    files: list[JsonObject] = doc_field([],
        "Per rank file a replica holds: relpath, persistent (path, verdict, tensors, status), "
        "replicas (where, path, verdict, tensors, status: same, differs, damaged, unreadable; "
        "differing tensors, only_here, only_persistent), resume_from, decision.")
    counts: dict[str, int] = doc_field({}, "Replica files per status.")
    replica_only: list[str] = doc_field([], "Files a replica holds that the persistent copy does not.")
    answer: str = answer_field()

    @property
    def ok(self) -> bool:
        return not any(k != "same" and v for k, v in self.counts.items()) and all(
            (f.get("persistent") or {}).get("status") == "intact" for f in self.files)
