"""``ckptrescue report --format case-uco|timeline|timeline-csv`` on a real case."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from cli_helpers import invoke


def _case_with_a_probe(tmp_path: Path) -> Path:
    case = tmp_path / "case"
    assert invoke("case", "new", str(case), "--title", "export").returncode == 0
    ckpt = tmp_path / "model.safetensors"
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    ckpt.write_bytes(len(header).to_bytes(8, "little") + header + bytes(4))  # truncated
    assert invoke("probe", str(ckpt), "--case", str(case)).returncode == 1
    return case


def test_case_uco_to_a_file_and_timelines_to_stdout(tmp_path: Path) -> None:
    case = _case_with_a_probe(tmp_path)
    out = tmp_path / "case.jsonld"
    result = invoke("report", str(case), "--format", "case-uco", "-o", str(out))
    assert result.returncode == 0, result.stderr
    doc = json.loads(out.read_text())
    assert "@graph" in doc and "@context" in doc
    text = json.dumps(doc)
    assert ("Investigation" in text and "SF00" in text) or "Annotation" in text
    jsonl = invoke("report", str(case), "--format", "timeline", "-o", "-")
    assert jsonl.returncode == 0, jsonl.stderr
    rows = [json.loads(line) for line in jsonl.stdout.splitlines()]
    assert rows and all({"message", "datetime", "timestamp_desc"} <= set(r) for r in rows)
    table = invoke("report", str(case), "--format", "timeline-csv", "-o", "-")
    parsed = list(csv.DictReader(io.StringIO(table.stdout)))
    assert len(parsed) == len(rows)


def test_an_export_over_the_case_records_is_refused(tmp_path: Path) -> None:
    case = _case_with_a_probe(tmp_path)
    result = invoke("report", str(case), "--format", "case-uco", "-o", str(case / "audit.jsonl"))
    assert result.returncode != 0 and "Traceback" not in result.stderr
