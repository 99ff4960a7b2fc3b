"""A case's step outputs, read by type (``outputs_of``): the one reader the answer, the report,
the TUI and the provenance index share.

Read in O(outputs): the ``step.finished`` records come through the case's record index (no
replay of the log), and each output artifact is parsed once per process (artifacts are
write-once and content-addressed, so a parsed one stays true; the few most recent are kept).
What it returns is shared between readers: read it, do not change it.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, TypeVar

from ckptrescue.engine.outputs import StepOutputs

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

O = TypeVar("O", bound=StepOutputs)  # noqa: E741

KEEP_PARSED = 8
_PARSED: OrderedDict[str, Any] = OrderedDict()
_MUTEX = threading.Lock()


def parsed_artifact(case: Case, sha256: str) -> Any:
    """An artifact's JSON, parsed once per process (the most recent :data:`KEEP_PARSED`)."""
    path = str(case.artifact_path(sha256).absolute())
    with _MUTEX:
        if path in _PARSED:
            _PARSED.move_to_end(path)
            return _PARSED[path]
    data = json.loads(case.read_artifact(sha256))
    with _MUTEX:
        _PARSED[path] = data
        while len(_PARSED) > KEEP_PARSED:
            _PARSED.popitem(last=False)
    return data


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
            results.append(kind.from_json(parsed_artifact(case, details["outputs_sha256"])))
        except (OSError, ValueError):
            continue
    return results
