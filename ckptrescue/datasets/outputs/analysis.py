"""The records of the analysis actions (``datasets/actions/analysis.py``): training state, dataset
profiles and comparisons."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ckptrescue.model import JsonObject, StepOutputs, answer_field, doc_field


@dataclass
class TrainStateOutput(StepOutputs):
    """What the ``trainstate`` step records (each field: docs/step-outputs.md)."""

    checkpoints: list[JsonObject] = doc_field([],
        "The run's checkpoints in training order: path, step, format, verdict.")
    tensors: list[JsonObject] = doc_field([],
        "Per tensor: name, intervals (from, to, rel_l2, max_abs_change, identical, elements, "
        "nonfinite), sign_agreement, norms, frozen.")
    scalars: dict[str, list[Any]] = doc_field({},
        "Per checkpoint: optimizer step counters, learning rates, scheduler last_epoch, "
        "global step.")
    skipped: dict[str, str] = doc_field({}, "Tensors not compared, with the reason.")
    findings: list[JsonObject] = doc_field([], "TS001-TS008 findings (also recorded in the case).")
    answer: str = answer_field()


@dataclass
class DatasetProfileOutput(StepOutputs):
    """What the ``dataset.profile`` step records (each field: docs/step-outputs.md)."""

    profile: JsonObject = doc_field({},
        "The dataset profile (schema ckptrescue.profile/1, docs/profiles.md).")
    output: str | None = doc_field(None, "Where the profile was written.")
    answer: str = answer_field()


@dataclass
class DatasetCompareOutput(StepOutputs):
    """What the ``dataset.compare`` step records (each field: docs/step-outputs.md)."""

    compare: JsonObject = doc_field({},
        "mode, thresholds, per_test_level, tests_run, answer, flagged checks (test, "
        "statistic, p-value, effect sizes, threshold), findings, skipped.")
    spot_checks: list[JsonObject] = doc_field([],
        "Per flagged shard (up to 5): seed, k, method, the sampled records of the flagged and "
        "the reference shard with the values that drove the flag marked.")
    answer: str = answer_field()

    @property
    def ok(self) -> bool:
        return not self.compare.get("flagged")
