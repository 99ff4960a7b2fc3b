"""Codes emitted by the training-state analysis across a run's checkpoints (``trainstate``)."""

from ckptrescue.model import Severity

E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO  # noqa: E741

CODES = {
    "TS001": (W, "Parameter never changes across the run's checkpoints while others do "
                 "(frozen by mistake?)"),
    "TS002": (E, "Optimizer step count goes backwards or resets between checkpoints"),
    "TS003": (W, "Optimizer second moments collapse to zero (state reset or overwritten)"),
    "TS004": (W, "Learning rate is zero or stuck while the step advances"),
    "TS005": (W, "LR-scheduler step disagrees with the optimizer step"),
    "TS006": (E, "No parameter changed between two checkpoints of different steps"),
    "TS007": (W, "A parameter's update is far larger than its own usual update (divergence?)"),
    "TS008": (I, "Parameters not comparable across checkpoints (shape, dtype or bytes)"),
}
