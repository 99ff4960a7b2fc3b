"""Training state across a run's checkpoints: each incident named, a healthy run silent."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

pytest.importorskip("torch")

from ckptrescue.datasets.trainstate.analysis import analyse, run_checkpoints  # noqa: E402
from fixtures.trainstate import write_run  # noqa: E402


def _digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir()}


def _run(tmp_path: Path, incident: str | None) -> tuple[object, dict[str, str], Path]:
    run = tmp_path / (incident or "healthy")
    write_run(run, incident=incident)
    before = _digest(run)
    result = analyse(run_checkpoints(run))
    assert _digest(run) == before  # evidence unchanged
    return result, before, run


def _codes(result: object) -> dict[str, list[object]]:
    out: dict[str, list[object]] = {}
    for f in result.findings:  # type: ignore[attr-defined]
        out.setdefault(f.code, []).append(f)
    return out


def test_a_healthy_run_has_no_findings_and_is_ordered_by_step(tmp_path: Path) -> None:
    result, _, _ = _run(tmp_path, None)
    assert _codes(result) == {}
    assert [c["step"] for c in result.checkpoints] == [100, 200, 300, 400]
    trend = {t.name: t for t in result.tensors}["model.encoder.weight"]
    assert not trend.frozen and all(i["rel_l2"] > 0 for i in trend.intervals)
    # the same delta every interval: successive updates point the same way
    assert all(a == pytest.approx(1.0) for a in trend.sign_agreement)
    assert result.scalars["optimizer.param_groups.0.lr"] == [2.0 ** -10] * 4


def test_a_frozen_parameter_is_named(tmp_path: Path) -> None:
    codes = _codes(_run(tmp_path, "frozen")[0])
    assert list(codes) == ["TS001"]
    assert codes["TS001"][0].tensors == ("model.encoder.weight",)
    assert "requires_grad" in codes["TS001"][0].title


def test_a_layer_that_froze_mid_run_is_named_with_its_step(tmp_path: Path) -> None:
    codes = _codes(_run(tmp_path, "frozen-late")[0])
    assert list(codes) == ["TS001"]
    f = codes["TS001"][0]
    assert f.tensors == ("model.encoder.weight",) and f.details["since_step"] == 200
    assert "from step 200" in f.title


def test_an_optimizer_reset_is_named(tmp_path: Path) -> None:
    codes = _codes(_run(tmp_path, "optimizer-reset")[0])
    assert set(codes) == {"TS002", "TS003"}
    assert "step-300.pt" in codes["TS002"][0].title
    assert set(codes["TS003"][0].tensors) == {f"optimizer.state.{i}.exp_avg_sq"
                                              for i in range(4)}


def test_a_zero_learning_rate_is_named(tmp_path: Path) -> None:
    codes = _codes(_run(tmp_path, "lr-zero")[0])
    assert "TS004" in codes and "step-300.pt" in codes["TS004"][0].title


def test_a_stuck_scheduler_is_named(tmp_path: Path) -> None:
    codes = _codes(_run(tmp_path, "scheduler-stuck")[0])
    assert list(codes) == ["TS005"]
    assert "lr_scheduler.last_epoch" in codes["TS005"][0].title


def test_identical_weights_under_a_new_step_are_no_progress(tmp_path: Path) -> None:
    codes = _codes(_run(tmp_path, "no-progress")[0])
    assert "TS006" in codes
    assert "step-200.pt" in codes["TS006"][0].title and "step-300.pt" in codes["TS006"][0].title


def test_an_update_spike_is_named_with_its_interval(tmp_path: Path) -> None:
    codes = _codes(_run(tmp_path, "spike")[0])
    assert list(codes) == ["TS007"]
    f = codes["TS007"][0]
    assert f.tensors == ("model.head.weight",) and f.details["interval"]["to"] == 400


def test_real_adam_with_a_frozen_layer(tmp_path: Path) -> None:
    """A real torch training loop (values from this CPU's math, asserted only qualitatively):
    the layer with requires_grad=False is named frozen; Adam's state is not flagged."""
    import torch

    from fixtures.checkpoints import exact_tensor

    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_(exact_tensor(*p.shape, seed=40 + i))
    model[0].weight.requires_grad_(False)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1000)
    x = exact_tensor(32, 8, seed=50)
    y = exact_tensor(32, 4, seed=51)
    for step in range(1, 31):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        sched.step()
        if step % 10 == 0:
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                        "lr_scheduler": sched.state_dict(), "global_step": step},
                       tmp_path / f"step-{step}.pt")
    result = analyse(run_checkpoints(tmp_path))
    codes = _codes(result)
    assert list(codes) == ["TS001"], [f.title for f in result.findings]
    assert codes["TS001"][0].tensors == ("model.0.weight",)
    assert result.scalars["optimizer.state.0.step"] == [10.0, 20.0, 30.0]
