"""The published detection rates (``docs/detection-rates.md``) are what the kit measures now: every
public corpus the kit is tested on (the peer scanners' samples of tests/checkpoints/
test_peer_corpora.py, the real checkpoints the training libraries wrote) probed, malicious
caught and benign flagged counted, and the committed table compared with the result. A change
in a verdict, a corpus or a library's output makes the table stale and this test fail
(``CKPTRESCUE_WRITE_DOCS=1`` rewrites it)."""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import pytest
from f1_build import built
from f2_build import built as built2

from ckptrescue.checkpoints.probes.checkpoints import probe_paths
from fixtures import detection_rates as dr

DOC = Path(__file__).resolve().parents[2] / "docs" / "detection-rates.md"
LIBRARIES = (("DeepSpeed", "deepspeed", "deepspeed", built),
             ("megatron-core", "megatron", "megatron-core", built),
             ("Accelerate", "accelerate", "accelerate", built2),
             ("torch.distributed.checkpoint (FSDP2)", "dcp", "torch", built2))


def test_the_published_table_is_current(tmp_path: Path) -> None:
    results: list[tuple[str, bool, str]] = []
    samples = dr.peer_samples(tmp_path / "peer")
    for path, malicious, source in samples:
        reports = probe_paths([path], numeric=False)
        assert len(reports) == 1, path
        results.append((dr.corpus_of(source), malicious, str(reports[0].verdict)))
    assert not (tmp_path / "peer" / "MARKER").exists()
    for label, lib, dist, build in LIBRARIES:
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pytest.skip(f"{dist} not installed: the table covers it")
        corpus = f"checkpoints written by {label} {version.split('+')[0]} (benign)"
        for report in probe_paths([build(lib)], numeric=False):
            results.append((corpus, False, str(report.verdict)))
    rows = dr.tally(results)
    assert sum(r.malicious for r in rows) > 500 and sum(r.benign for r in rows) > 60
    text = dr.render(rows)
    if os.environ.get("CKPTRESCUE_WRITE_DOCS"):
        DOC.write_text(text)
    assert DOC.is_file() and DOC.read_text() == text, (
        "docs/detection-rates.md is stale: CKPTRESCUE_WRITE_DOCS=1 pytest "
        "tests/families/test_detection_rates.py rewrites it\n" + text)
