"""A case is read by the output type each ``step.finished`` record names: no action registry
is needed to read one (the case reader imports none), and older cases (records without a type)
are read through the frozen table of what each action recorded then."""

from __future__ import annotations

import json
from pathlib import Path

from import_graph import all_imports

from ckptrescue.actions import registry
from ckptrescue.checkpoints.outputs import ProbeOutput, RankOutput
from ckptrescue.engine import executor as engine
from ckptrescue.engine.case_outputs import LEGACY_OUTPUT_TYPES, outputs_of
from ckptrescue.model import StepOutputs
from ckptrescue.record.case import Case


def test_the_case_reader_imports_no_action_registry() -> None:
    readers = {"ckptrescue.engine.case_outputs", "ckptrescue.engine.answer",
               "ckptrescue.report.model"}
    bad = [i.where for i in all_imports()
           if i.importer in readers and i.target.startswith("ckptrescue.actions")]
    assert not bad, bad


def test_output_type_names_are_unique() -> None:
    by_name: dict[str, type[StepOutputs]] = {}
    for action in registry().values():
        kind = action.output_type
        assert by_name.setdefault(kind.__name__, kind) is kind, kind.__name__


def test_legacy_table_is_what_each_action_records() -> None:
    actions = registry()
    for name, kind in LEGACY_OUTPUT_TYPES.items():
        if name in actions:  # an action may go; its old records still read as they were
            assert actions[name].output_type.__name__ == kind, name


def test_step_finished_names_its_output_type(tmp_path: Path) -> None:
    case = Case.create(tmp_path / "case")
    plan = engine.single_step("case.verify", {})
    list(engine.run(plan, case=case))
    (record,) = case.records("step.finished")
    assert record["details"]["output_type"] == "CaseVerifyOutput"
    assert [type(o) for o in outputs_of(case, StepOutputs)] == [StepOutputs]


def test_a_named_type_wins_over_the_action_name(tmp_path: Path) -> None:
    case = Case.create(tmp_path / "case")
    sha = case.store_artifact(json.dumps({"checkpoints": [{"path": "a.pt",
                                                           "verdict": "intact"}]}).encode(),
                              name="s.outputs.json", kind="result:renamed")
    case.log("step.finished", {"run_key": "k", "step": "s", "action": "renamed.probe",
                               "output_type": "ProbeOutput", "status": "ok",
                               "outputs_sha256": sha})
    assert [c.path for o in outputs_of(case, ProbeOutput) for c in o.checkpoints] == ["a.pt"]
    assert outputs_of(case, RankOutput) == []
