"""Step outputs have a schema: each action names its output record type; readers (answer.py,
the report, the TUI, the CLI) load stored outputs by that type, not by action-name strings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ckptrescue.actions import registry
from ckptrescue.checkpoints.outputs import ProbeOutput, RankOutput
from ckptrescue.engine.answer import latest_checkpoints, outputs_of
from ckptrescue.model import StepOutputs
from ckptrescue.record.case import Case


def test_every_action_declares_its_output_type() -> None:
    for name, action in registry().items():
        assert action.output_type is not StepOutputs, name
        assert issubclass(action.output_type, StepOutputs), name
        assert action.output_type.field_docs(), name


def test_stored_json_round_trips_and_old_records_load() -> None:
    stored = {"checkpoints": [{"path": "a.pt", "verdict": "intact"}], "later_key": 1}
    typed = ProbeOutput.from_json(stored)
    assert [c.to_json() for c in typed.checkpoints] == stored["checkpoints"]  # typed records
    assert typed.checkpoints[0].verdict == "intact" and typed.extra == {"later_key": 1}
    assert typed.to_json() == stored
    assert RankOutput.from_json({}).resume_from is None  # a key an older case lacks


def _finished(case: Case, step: str, action: str, outputs: dict[str, Any]) -> None:
    sha = case.store_artifact(json.dumps(outputs).encode(), name=f"{step}.outputs.json",
                              kind=f"result:{action}")
    case.log("step.finished", {"run_key": "k", "step": step, "action": action,
                               "status": "ok", "outputs_sha256": sha})


def test_readers_find_outputs_by_type_not_by_key(tmp_path: Path) -> None:
    case = Case.create(tmp_path / "case")
    # rank's outputs also have "checkpoints": they are not probe results
    _finished(case, "r", "rank", {"checkpoints": [{"path": "/x/rank-only.pt",
                                                   "verdict": "damaged"}],
                                  "resume_from": None})
    _finished(case, "p", "probe", {"checkpoints": [{"path": "/x/step-1.pt",
                                                    "verdict": "truncated"}]})
    assert list(latest_checkpoints(case)) == ["/x/step-1.pt"]
    ranks = outputs_of(case, RankOutput)
    assert len(ranks) == 1 and ranks[0].checkpoints[0].path == "/x/rank-only.pt"
    assert [type(o) for o in outputs_of(case, StepOutputs)] == [StepOutputs, StepOutputs]


def test_other_domains_are_read_only_when_the_case_holds_their_records(tmp_path: Path) -> None:
    from ckptrescue.engine.answer import answer_line
    from ckptrescue.engine.case_outputs import STORAGE, domains_held, holds_records_beyond

    def holds_other_domains(case: Case) -> bool:  # these records are older ones: no modules
        return domains_held(case)(STORAGE)

    case = Case.create(tmp_path / "case")
    assert not holds_other_domains(case)  # nothing recorded yet
    _finished(case, "p", "probe", {"checkpoints": [{"path": "/x/step-1.pt",
                                                    "verdict": "truncated"}]})
    _finished(case, "r", "rank", {"checkpoints": [], "resume_from": None})
    assert not holds_other_domains(case)
    assert holds_records_beyond(case, "ckptrescue.storage.outputs")
    assert answer_line(case) == "no checkpoint is safe to resume from; step-1.pt truncated"
    # an image's record (not a checkpoint record): its part is read
    _finished(case, "i", "image", {"bad_ranges": [[0, 512], [4096, 5120]]})
    assert holds_other_domains(case)
    assert answer_line(case).endswith("; 1536 bytes unreadable on the source in 2 range(s)")
    # a type this version does not know is not a checkpoint record either
    other = Case.create(tmp_path / "other")
    sha = other.store_artifact(b"{}", name="x.outputs.json", kind="result:x")
    other.log("step.finished", {"run_key": "k", "step": "x", "action": "x", "status": "ok",
                                "output_type": "FutureOutput", "outputs_sha256": sha})
    assert holds_other_domains(other)


PROBE_IMPORTS = r"""
import sys
from ckptrescue.cli.main import run
code = run(["probe", "--json", sys.argv[1]])
print("exit", code, sorted(m for m in sys.modules if m.endswith(".outputs") or ".outputs." in m),
      file=sys.stderr)
"""


def test_a_probe_imports_no_other_domains_records(tmp_path: Path) -> None:
    import subprocess
    import sys

    import numpy as np

    path = tmp_path / "w.safetensors"
    data = np.arange(64, dtype=np.float32).tobytes()
    header = json.dumps({"w": {"dtype": "F32", "shape": [64], "data_offsets": [0, 256]}})
    path.write_bytes(len(header).to_bytes(8, "little") + header.encode() + data)
    proc = subprocess.run([sys.executable, "-c", PROBE_IMPORTS, str(path)], capture_output=True,
                          text=True, timeout=120, check=True)
    assert json.loads(proc.stdout)["checkpoints"][0]["verdict"] == "intact"
    assert proc.stderr.strip().endswith("exit 0 ['ckptrescue.checkpoints.outputs']"), \
        proc.stderr


def test_a_manifest_build_imports_no_other_domains_records(tmp_path: Path) -> None:
    """Each ``step.finished`` names the modules of its output type: a dataset command's case
    reads, and imports, the dataset records alone (not the checkpoint, storage or store ones)."""
    import subprocess
    import sys

    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a\n")
    Case.create(tmp_path / "case", title="t", examiner="pytest")
    code = PROBE_IMPORTS.replace('["probe", "--json", sys.argv[1]]',
                                 '["manifest", "build", sys.argv[1], "-o", sys.argv[2], '
                                 '"--no-progress", "--case", sys.argv[3]]')
    proc = subprocess.run([sys.executable, "-c", code, str(data), str(tmp_path / "m.sha256"),
                           str(tmp_path / "case")], capture_output=True, text=True, timeout=120)
    # the dataset wing's records of the manifest actions alone, not its other families
    assert proc.stderr.strip().endswith(
        "exit 0 ['ckptrescue.datasets.outputs', 'ckptrescue.datasets.outputs.manifests']"), \
        proc.stderr
    case = Case.open(tmp_path / "case")
    (record,) = case.records("step.finished")
    assert record["details"]["output_modules"] == ["ckptrescue.datasets.outputs.manifests"]


def test_a_dataset_record_counts_for_its_domain_under_the_old_and_the_new_module(
        tmp_path: Path) -> None:
    """Cases written before the dataset records became a package name
    ``ckptrescue.datasets.outputs``; newer ones its family module: both are the dataset
    domain, and a module that only begins with the same letters is not."""
    from ckptrescue.datasets.outputs import ManifestBuildOutput
    from ckptrescue.engine.case_outputs import DATASETS, domains_held, outputs_of

    for modules, held in ((["ckptrescue.datasets.outputs"], True),
                          (["ckptrescue.datasets.outputs.manifests"], True),
                          (["ckptrescue.datasets.outputsx"], False)):
        case = Case.create(tmp_path / modules[0])
        sha = case.store_artifact(json.dumps({"root": "/d", "files": 3}).encode(),
                                  name="b.outputs.json", kind="result:x")
        case.log("step.finished", {"run_key": "k", "step": "b", "action": "manifest.build",
                                   "status": "ok", "output_type": "ManifestBuildOutput",
                                   "output_modules": modules, "outputs_sha256": sha})
        assert domains_held(case)(DATASETS) is held, modules
        assert [o.files for o in outputs_of(case, ManifestBuildOutput)] == [3]


def test_each_domain_s_part_comes_from_the_modules_its_records_name(tmp_path: Path) -> None:
    from ckptrescue.engine.answer import answer_line
    from ckptrescue.engine.case_outputs import domains_held

    case = Case.create(tmp_path / "case")

    def finished(step: str, output_type: str, modules: list[str], outputs: dict[str, Any]) -> None:
        sha = case.store_artifact(json.dumps(outputs).encode(), name=f"{step}.outputs.json",
                                  kind="result:x")
        case.log("step.finished", {"run_key": "k", "step": step, "action": "x", "status": "ok",
                                   "output_type": output_type, "output_modules": modules,
                                   "outputs_sha256": sha})

    finished("i", "ImageOutput", ["ckptrescue.storage.outputs"],
             {"bad_ranges": [[0, 512], [4096, 5120]]})
    held = domains_held(case)
    assert held("ckptrescue.storage.outputs") and not held("ckptrescue.checkpoints.outputs")
    assert answer_line(case) == "1536 bytes unreadable on the source in 2 range(s)"
    finished("r", "RankOutput", ["ckptrescue.checkpoints.outputs"],
             {"checkpoints": [], "resume_from": None})
    assert answer_line(case) == ("no checkpoint is safe to resume from; 1536 bytes unreadable "
                                 "on the source in 2 range(s)")
    # a record that does not name its modules (an older case's): any domain may be held
    finished("x", "FutureOutput", None, {})  # type: ignore[arg-type]
    assert domains_held(case)("ckptrescue.stores.outputs")


def test_a_dataset_family_is_read_when_the_case_names_it_or_the_whole_old_module(
        tmp_path: Path) -> None:
    """The answer reads the training-state records (the analysis family) of a case whose
    ``step.finished`` names that family's module, or the one module older cases named; a case
    whose records are all of another family does not import them."""
    import subprocess
    import sys

    from ckptrescue.engine.answer import answer_line

    state = {"findings": [{"code": "TS001", "title": "loss went to NaN at step 40"}]}
    for n, modules in enumerate((["ckptrescue.datasets.outputs.analysis"],
                                 ["ckptrescue.datasets.outputs"])):
        case = Case.create(tmp_path / f"c{n}")
        sha = case.store_artifact(json.dumps(state).encode(), name="t.outputs.json",
                                  kind="result:x")
        case.log("step.finished", {"run_key": "k", "step": "t", "action": "trainstate.check",
                                   "status": "ok", "output_type": "TrainStateOutput",
                                   "output_modules": modules, "outputs_sha256": sha})
        assert answer_line(case) == ("training state: 1 finding(s) (TS001): loss went to NaN "
                                     "at step 40"), modules
    case = Case.create(tmp_path / "build")
    sha = case.store_artifact(json.dumps({"root": "/d", "files": 1}).encode(),
                              name="b.outputs.json", kind="result:x")
    case.log("step.finished", {"run_key": "k", "step": "b", "action": "manifest.build",
                               "status": "ok", "output_type": "ManifestBuildOutput",
                               "output_modules": ["ckptrescue.datasets.outputs.manifests"],
                               "outputs_sha256": sha})
    code = ("import sys\n"
            "from pathlib import Path\n"
            "from ckptrescue.engine.answer import answer_line\n"
            "from ckptrescue.record.case import Case\n"
            "answer_line(Case.open(Path(sys.argv[1])))\n"
            "print(sorted(m for m in sys.modules if '.outputs.' in m))\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "build")],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    assert out.strip() == "['ckptrescue.datasets.outputs.manifests']"
