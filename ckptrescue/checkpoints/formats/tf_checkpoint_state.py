"""TensorFlow's ``checkpoint`` state file (``CheckpointState`` text proto), TF-free.

Who calls it: the generic checkpoint probe (this module's ``FORMATS``) when a ``checkpoint`` file
is given, and :mod:`tensorbundle` to know which prefixes a run's state file names (a named prefix
with no ``.index`` is a dangling reference: ``TC001``).

Fields (``checkpoint_state.proto``): ``model_checkpoint_path`` (1), ``all_model_checkpoint_paths``
(2), ``all_model_checkpoint_timestamps`` (3), ``last_preserved_timestamp`` (4). Paths may be
relative to the file's folder.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import ClassVar

from ckptrescue.checkpoints.base import CheckpointReport, ProbeOptions, Verdict
from ckptrescue.checkpoints.formats.tensorbundle_index import data_files, index_path
from ckptrescue.model import Finding, Severity

FORMAT = "tf-checkpoint-state"
MAX_STATE_BYTES = 1024 * 1024
_LINE = re.compile(r'^\s*(?P<key>[a-z_]+)\s*:\s*(?P<value>"(?:[^"\\]|\\.)*"|[-+0-9.eE]+)\s*$')
_KEYS = {"model_checkpoint_path", "all_model_checkpoint_paths",
         "all_model_checkpoint_timestamps", "last_preserved_timestamp"}


@dataclass
class CheckpointState:
    path: Path
    model_checkpoint_path: str | None = None
    all_model_checkpoint_paths: list[str] = field(default_factory=list)
    timestamps: list[float] = field(default_factory=list)
    last_preserved_timestamp: float | None = None
    unparsed: list[str] = field(default_factory=list)

    def resolve(self, name: str) -> Path:
        p = Path(name)
        return p if p.is_absolute() else self.path.parent / p

    @property
    def prefixes(self) -> list[Path]:
        """Every prefix named, newest (``model_checkpoint_path``) last, without duplicates."""
        names = list(self.all_model_checkpoint_paths)
        if self.model_checkpoint_path and self.model_checkpoint_path not in names:
            names.append(self.model_checkpoint_path)
        return [self.resolve(n) for n in names]


def parse_state(path: Path) -> CheckpointState:
    """Parse a state file; lines that do not parse are kept in ``unparsed``."""
    state = CheckpointState(path)
    with path.open("rb") as fh:
        text = fh.read(MAX_STATE_BYTES).decode("utf-8", "replace")
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _LINE.match(line)
        if not m or m.group("key") not in _KEYS:
            state.unparsed.append(line[:200])
            continue
        key, raw = m.group("key"), m.group("value")
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            state.unparsed.append(line[:200])
            continue
        if key == "model_checkpoint_path":
            state.model_checkpoint_path = str(value)
        elif key == "all_model_checkpoint_paths":
            state.all_model_checkpoint_paths.append(str(value))
        elif key == "all_model_checkpoint_timestamps":
            state.timestamps.append(float(value))
        else:
            state.last_preserved_timestamp = float(value)
    return state


def looks_like_state(path: Path) -> bool:
    try:
        if not path.is_file() or path.stat().st_size > MAX_STATE_BYTES:
            return False
        state = parse_state(path)
    except OSError:
        return False
    return state.model_checkpoint_path is not None and not state.unparsed


def prefix_exists(prefix: Path) -> bool:
    return index_path(prefix).exists()


def state_findings(state: CheckpointState) -> list[Finding]:
    out: list[Finding] = []
    ev = str(state.path)
    if state.unparsed or state.model_checkpoint_path is None:
        out.append(Finding("TC002", Severity.WARNING,
                           f"{len(state.unparsed)} line(s) of the state file do not parse"
                           + ("; no model_checkpoint_path" if not state.model_checkpoint_path
                              else ""), evidence=ev, source="tf-checkpoint-state",
                           details={"lines": state.unparsed[:10]}))
    latest = state.resolve(state.model_checkpoint_path) if state.model_checkpoint_path else None
    for prefix in state.prefixes:
        if prefix_exists(prefix):
            continue
        is_latest = prefix == latest
        has_data = bool(data_files(prefix))
        local = state.path.parent / prefix.name
        if prefix.parent != state.path.parent and prefix_exists(local):
            out.append(Finding(
                "TC004", Severity.ERROR if is_latest else Severity.WARNING,
                f"the state file names {prefix} (absolute, does not exist) while {local.name} "
                "exists next to it: the run was moved, and tf.train.latest_checkpoint returns "
                "None", evidence=ev, source="tf-checkpoint-state",
                details={"prefix": str(local), "named": str(prefix), "latest": is_latest}))
            continue
        out.append(Finding(
            "TC001", Severity.ERROR if is_latest else Severity.WARNING,
            f"the state file names {prefix.name} ({'latest' if is_latest else 'older'}) but "
            f"{index_path(prefix).name} does not exist"
            + (" (data shards present: interrupted save)" if has_data else ""),
            evidence=ev, source="tf-checkpoint-state",
            details={"prefix": str(prefix), "latest": is_latest}))
    ts = state.timestamps
    if any(b < a for a, b in pairwise(ts)):
        out.append(Finding("TC003", Severity.WARNING, "all_model_checkpoint_timestamps are not "
                           "increasing", evidence=ev, source="tf-checkpoint-state",
                           details={"timestamps": ts}))
    return out


def findings_for_prefix(prefix: Path) -> list[Finding]:
    """State-file findings about ``prefix`` from a ``checkpoint`` file in its folder."""
    state_file = prefix.parent / "checkpoint"
    if not looks_like_state(state_file):
        return []
    return [f for f in state_findings(parse_state(state_file))
            if f.details.get("prefix") == str(prefix)]


class TFCheckpointStateFormat:
    """The ``checkpoint`` text file; its report is about the references, it holds no tensors."""

    name: ClassVar[str] = FORMAT
    priority: ClassVar[int] = 45

    @classmethod
    def detect(cls, path: Path) -> bool:
        return looks_like_state(path)

    @classmethod
    def probe(cls, path: Path, options: ProbeOptions) -> CheckpointReport:
        state = parse_state(path)
        report = CheckpointReport(path=str(path), format=FORMAT, verdict=Verdict.INTACT,
                                  files=[str(path)])
        report.findings = state_findings(state)
        report.extra = {"model_checkpoint_path": state.model_checkpoint_path,
                        "prefixes": [str(p) for p in state.prefixes],
                        "holds_tensors": False}
        if any(f.code == "TC001" and f.details.get("latest") for f in report.findings):
            report.verdict = Verdict.INCOMPLETE
        return report


FORMATS = [TFCheckpointStateFormat]
