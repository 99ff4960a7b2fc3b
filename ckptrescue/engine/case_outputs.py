"""A case's step outputs, read by type (``outputs_of``): the one reader the answer, the report,
the TUI and the provenance index share."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, TypeVar

from ckptrescue.engine.outputs import StepOutputs

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

O = TypeVar("O", bound=StepOutputs)  # noqa: E741


def outputs_of(case: Case, kind: type[O]) -> list[O]:
    """The outputs of every finished step whose action records ``kind``, oldest first.

    Read by type: the action of each ``step.finished`` record names its output type
    (``Action.output_type``), whatever the action is called.
    """
    from ckptrescue.actions import registry

    actions = registry()
    results: list[O] = []
    for record in case.records("step.finished"):
        details = record["details"]
        action = actions.get(str(details.get("action") or ""))
        if action is None or not issubclass(action.output_type, kind) \
                or not details.get("outputs_sha256"):
            continue
        try:
            results.append(kind.from_json(json.loads(case.read_artifact(
                details["outputs_sha256"]))))
        except (OSError, ValueError):
            continue
    return results
