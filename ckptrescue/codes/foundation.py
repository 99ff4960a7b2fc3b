"""Codes emitted by the case, audit log and guarded runner."""

from ckptrescue.model import Severity

CODES = {
    "RN001": (Severity.WARNING, "A command was refused by the safety guard"),
    "RN002": (Severity.ERROR, "A command exceeded its time limit and was killed"),
    "RN003": (Severity.WARNING, "A command's output exceeded its cap and was truncated"),
    "RN004": (Severity.ERROR, "A command could not be started (tool missing or not executable)"),
    "RN005": (Severity.INFO, "A command exited non-zero"),
    "AU001": (Severity.WARNING, "The audit log ends in a torn (partially written) record"),
    "AU002": (Severity.INFO, "A torn audit record was detected and chained over"),
}
