"""Scale paths of the family probe on a synthetic 80-rank DeepSpeed-layout step
(``fixtures/families/deepspeed_synth.py``, ``torch.save`` in DeepSpeed's dict shape): jobs=2 gives
the report jobs=1 gives, and the Dask path (a LocalCluster, ``processes=False``) the report a
local run gives, with a torn and a missing rank named the same way everywhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckptrescue.checkpoints.base import Verdict
from ckptrescue.checkpoints.probes.checkpoints import probe_paths
from fixtures.families.deepspeed_synth import make_step

torch = pytest.importorskip("torch")
DP = 80


@pytest.fixture(scope="module")
def steps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("scale")
    good = make_step(base / "good", DP, 3)
    bad = make_step(base / "bad", DP, 3)
    (bad / "zero_pp_rank_40_mp_rank_00_optim_states.pt").unlink()
    torn = bad / "zero_pp_rank_17_mp_rank_00_optim_states.pt"
    with open(torn, "r+b") as fh:
        fh.truncate(torn.stat().st_size - 200)
    return {"good": good, "bad": bad}


@pytest.fixture(scope="module")
def cluster():  # noqa: ANN201
    distributed = pytest.importorskip("distributed")
    lc = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp",
                                  dashboard_address=None, silence_logs=40)
    try:
        yield lc.scheduler_address
    finally:
        lc.close()


def as_json(reports: list) -> str:  # noqa: ANN001
    return json.dumps([r.to_json(with_tensors=True) for r in reports], sort_keys=True,
                      default=str)


def test_synthetic_step_is_intact_where_torch_loads_it(steps: dict[str, Path]) -> None:
    for f in sorted(steps["good"].glob("*.pt")):
        torch.load(f, weights_only=True)
    seen: list[tuple[str, str, str]] = []
    r = probe_paths([steps["good"]], progress=lambda *a: seen.append(a))[0]
    assert r.verdict is Verdict.INTACT, [f.title for f in r.findings][:5]
    fam = r.extra["family"]
    assert fam["world"] == {"dp": DP, "mp": 1, "zero_stage": 2}
    assert fam["members"] == DP + 1 and fam["bad_ranks"] == []
    assert fam["tensors_elided"] > 0 and r.tensors == []  # > 64 members: intact ones elided
    assert len(seen) == DP + 1


def test_bad_ranks_named(steps: dict[str, Path]) -> None:
    r = probe_paths([steps["bad"]])[0]
    assert r.verdict in (Verdict.TRUNCATED, Verdict.INCOMPLETE)  # the worst of the two
    assert r.extra["family"]["bad_ranks"] == ["zero_pp_rank_17_mp_rank_00",
                                              "zero_pp_rank_40_mp_rank_00"]
    assert r.extra["family"]["ranks"]["zero_pp_rank_40_mp_rank_00"] == "missing"
    assert {t.name.split("/")[0] for t in r.tensors} == {"zero_pp_rank_17_mp_rank_00"}


def test_jobs_2_equals_jobs_1(steps: dict[str, Path]) -> None:
    for key in ("good", "bad"):
        serial = probe_paths([steps[key]])
        parallel = probe_paths([steps[key]], jobs=2)
        assert as_json(parallel) == as_json(serial)


def test_dask_equals_local(steps: dict[str, Path], cluster: str) -> None:
    local = probe_paths([steps["good"].parent.parent])
    seen: list[tuple[str, str, str]] = []
    remote = probe_paths([steps["good"].parent.parent], scheduler=cluster,
                         progress=lambda *a: seen.append(a))
    assert [r.path for r in remote] == [r.path for r in local]
    assert as_json(remote) == as_json(local)
    assert len(seen) == 2 * DP + 1  # every present rank file of both steps
