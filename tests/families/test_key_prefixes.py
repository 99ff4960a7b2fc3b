"""``resume keys``: checkpoints whose names do not load into the model, each written by the real
code path that causes it (``fixtures/key_prefixes.py``: torch.compile, DistributedDataParallel
and FSDP under torch.multiprocessing with 2 gloo ranks on CPU, safetensors' save_model of tied
weights, a training checkpoint, a renamed layer). The oracle is the real
``model.load_state_dict(strict=True)`` in a child process: it fails on the names as saved and
succeeds after the printed ``fix_keys``."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import warm_python
from cli_helpers import invoke
from fixture_cache import cached_dir

from ckptrescue.checkpoints.key_mismatch import explain_checkpoint
from ckptrescue.record.case import Case

REPO = Path(__file__).resolve().parents[2]

ORACLE = textwrap.dedent("""
    import json, sys, torch
    sys.path.insert(0, sys.argv[1])
    import tinylm
    path, snippet, container, cls = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file
        sd = load_file(path)
    else:
        sd = torch.load(path, weights_only=True)
    model = getattr(tinylm, cls)()
    out = {}
    try:
        model.load_state_dict(sd, strict=True)
        out["as_saved"] = "ok"
    except Exception as exc:
        out["as_saved"] = type(exc).__name__
    for part in [p for p in container.split(".") if p]:
        sd = sd[part]
    scope = {}
    exec(snippet, scope)
    fixed = scope["fix_keys"](sd)
    try:
        model.load_state_dict(fixed, strict=True)
        out["fixed"] = "ok"
        out["equal"] = all(torch.equal(model.state_dict()[k], fixed[k]) for k in fixed)
    except Exception as exc:
        out["fixed"] = type(exc).__name__ + ": " + str(exc)[:300]
    print("ORACLE" + json.dumps(out))
""")


@pytest.fixture(scope="module")
def made() -> Path:
    """The fixture files, written once under an exclusive lock (xdist workers wait and reuse them)
    and cached under build/ until the writer or torch changes."""
    version = importlib.metadata.version("torch")

    def write(out: Path) -> None:
        proc = subprocess.run([sys.executable, "-m", "fixtures.key_prefixes", str(out)],
                              cwd=REPO, capture_output=True, text=True, timeout=1200)
        assert proc.returncode == 0, proc.stderr[-3000:]

    return cached_dir("key-prefixes", write, ["fixtures/key_prefixes.py"],
                      extra=f"torch=={version}")


def oracle(made: Path, name: str, result_json: dict, cls: str = "TinyLM") -> dict:
    container = next((r["detail"]["prefix"] for r in result_json["rules"]
                      if r["kind"] == "container"), "")
    proc = warm_python.run(ORACLE, str(made), str(made / name), result_json["snippet"],
                           container, cls, cwd=os.getcwd(), env=os.environ, timeout=600)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("ORACLE")), None)
    assert line is not None, proc.stderr[-3000:]
    return json.loads(line[len("ORACLE"):])


@pytest.mark.parametrize(("name", "causes"), [
    ("compiled.pt", ["_orig_mod. from torch.compile"]),
    ("ddp.pt", ["module. from DistributedDataParallel"]),
    ("ddp_compiled.pt", ["module. from DistributedDataParallel", "_orig_mod. from torch.compile"]),
    ("training.pt", ["the state dict is under 'model.'"]),
    ("tied.safetensors", ["tied weights saved once: lm_head.weight = embed.weight"]),
])
def test_explained_and_fixed_where_the_real_load_agrees(made: Path, name: str,
                                                        causes: list[str]) -> None:
    result = explain_checkpoint(str(made / name), reference=str(made / "reference.pt"))
    data = result.to_json()
    assert data["resolved"] is True and data["matched_after"] == data["expected_keys"] == 10
    assert data["matched_before"] < 10
    assert len(data["causes"]) == len(causes)
    for got, want in zip(data["causes"], causes, strict=True):
        assert got.startswith(want), (got, want)
    got = oracle(made, name, data)
    assert got["as_saved"] != "ok"
    assert got["fixed"] == "ok" and got["equal"] is True
    assert {f.code for f in result.findings()} == {"KM002"}


def test_renamed_layer_from_a_key_list(made: Path, tmp_path: Path) -> None:
    listing = subprocess.run([sys.executable, "-c", (
        "import sys; sys.path.insert(0, sys.argv[1]); import tinylm\n"
        "for k, v in tinylm.RenamedLM().state_dict().items(): print(k, list(v.shape))"),
        str(made)], capture_output=True, text=True, check=True, timeout=300).stdout
    keys = tmp_path / "expected.txt"
    keys.write_text(listing)
    result = explain_checkpoint(str(made / "renamed.pt"), keys_file=str(keys))
    data = result.to_json()
    assert data["causes"] == ["layer renamed: attn -> attention"]
    assert {"from": "blocks.1.attn.weight", "to": "blocks.1.attention.weight"} in data["mapping"]
    got = oracle(made, "renamed.pt", data, cls="RenamedLM")
    assert got["as_saved"] != "ok" and got["fixed"] == "ok"


def test_fsdp_flat_parameters_are_named_not_mapped(made: Path) -> None:
    result = explain_checkpoint(str(made / "fsdp_flat.pt"), reference=str(made / "reference.pt"))
    data = result.to_json()
    assert data["resolved"] is False
    assert data["flat_params"] == ["_fsdp_wrapped_module._flat_param"]
    assert any("FSDP flat parameters" in c for c in data["causes"])
    assert "KM003" in {f.code for f in result.findings()}


def test_shape_difference_is_not_a_rename(made: Path, tmp_path: Path) -> None:
    keys = tmp_path / "wider.txt"
    keys.write_text("embed.weight [16, 12]\nlm_head.weight [16, 12]\n"
                    "blocks.0.attn.weight [12, 12]\n")
    result = explain_checkpoint(str(made / "reference.pt"), keys_file=str(keys))
    data = result.to_json()
    assert data["resolved"] is False
    assert {b["model"] for b in data["shape_mismatches"]} == {"embed.weight", "lm_head.weight",
                                                               "blocks.0.attn.weight"}


def test_model_class_in_the_sandbox_cli_case_report(made: Path, tmp_path: Path) -> None:
    case_dir = tmp_path / "case"
    Case.create(case_dir, title="keys")
    res = invoke("resume", "keys", str(made / "renamed.pt"), "--model-class",
                 "tinylm:RenamedLM", "--model-path", str(made), "--case", str(case_dir),
                 "--json")
    if "sandbox-unavailable" in res.stderr:
        pytest.skip("the loader sandbox cannot start here")
    assert res.returncode == 1, res.stderr
    data = json.loads(res.stdout)
    assert data["expected_from"] == "model class tinylm:RenamedLM"
    assert data["causes"] == ["layer renamed: attn -> attention"] and data["resolved"]
    assert {"name": "lm_head.weight", "copy_of": "embed.weight"} not in data["tied"]
    human = invoke("resume", "keys", str(made / "ddp_compiled.pt"), "--reference",
                   str(made / "reference.pt"), "--case", str(case_dir))
    assert human.returncode == 1
    assert "def fix_keys(sd):" in human.stdout.splitlines()[-9] or \
        "    def fix_keys(sd):" in human.stdout
    md = invoke("report", str(case_dir), "--format", "md", "-o", str(tmp_path / "r.md"))
    assert md.returncode == 0, md.stderr
    text = (tmp_path / "r.md").read_text()
    assert "## Checkpoint names against the model's" in text
    assert "module._orig_mod.embed.weight" in text
    both = invoke("resume", "keys", str(made / "ddp.pt"), "--reference", str(made / "x.pt"),
                  "--keys", str(made / "y.txt"))
    assert both.returncode == 2 and "exactly one of" in both.stderr
    fifo = tmp_path / "keys.fifo"
    import os

    os.mkfifo(fifo)
    bad = invoke("resume", "keys", str(made / "ddp.pt"), "--keys", str(fifo))
    assert bad.returncode == 2 and "not a regular file" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_resume_checks_playbook_runs_the_keys_step(made: Path, tmp_path: Path) -> None:
    res = invoke("playbook", "run", "resume-checks", "--case", str(tmp_path / "case"), "--yes",
                 "--json", "-p", f"run_dir={made / 'ddp.pt'}", "-p",
                 f"checkpoint={made / 'ddp.pt'}", "-p", f"reference={made / 'reference.pt'}")
    assert res.returncode in (0, 1), res.stderr
    case = Case.open(tmp_path / "case")
    steps = {r["details"]["step"]: r["details"]["status"] for r in case.records("step.finished")}
    assert steps["keys-from-reference"] == "findings"
    assert "keys: 0 of 10 expected names match as saved; 10 after the mapping" in \
        json.loads(res.stdout)["answer"]
