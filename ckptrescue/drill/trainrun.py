"""Write a small but real training run with torch: checkpoints with optimizer state, a
safetensors export, a sharded Hugging Face export and a DCP checkpoint.

Imported only by the drill (torch is imported inside the functions).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ckptrescue import imports_kept
from ckptrescue.model import JsonObject

STEPS = (100, 200, 300, 350, 400)


class EvilHook:
    """Pickles as ``posix.system(CMD)``: the malicious checkpoint the drill plants.

    Pickling never runs anything; only *unpickling* would. ckptrescue never unpickles it.
    """

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        import os

        return (os.system, (self.command,))


def _model() -> Any:
    import torch
    from torch import nn

    torch.manual_seed(1234)
    return nn.Sequential(
        nn.Linear(64, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
        nn.Linear(64, 10),
    )


def write_run(run_dir: Path, *, marker: Path) -> JsonObject:
    """Train for a few hundred tiny steps, saving checkpoints; returns what was written."""
    with imports_kept():  # and what _exports uses
        import safetensors.torch  # noqa: F401
        import torch
        import torch.distributed.checkpoint  # noqa: F401

    # one thread: the layers are too small to share, and the drill's TensorFlow child runs
    # beside this (torch's idle threads spin on a core it wants: 5 CPU-s more per drill here)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train(run_dir, marker=marker)
    finally:
        torch.set_num_threads(threads)


def _train(run_dir: Path, *, marker: Path) -> JsonObject:
    import torch
    from torch import nn

    run_dir.mkdir(parents=True, exist_ok=True)
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=100, gamma=0.9)
    gen = torch.Generator().manual_seed(7)
    loss_fn = nn.CrossEntropyLoss()
    written: dict[str, Any] = {"checkpoints": []}
    for step in range(1, max(STEPS) + 1):
        x = torch.randn(32, 64, generator=gen)
        y = torch.randint(0, 10, (32,), generator=gen)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        if step in STEPS:
            state: dict[str, Any] = {
                "model": model.state_dict(), "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(), "step": step, "loss": float(loss.detach()),
            }
            if step == 350:
                state["callbacks"] = EvilHook(f"touch {marker}")
            path = run_dir / f"step-{step}.pt"
            torch.save(state, path)
            written["checkpoints"].append(path.name)
        if step == 300:
            _exports(run_dir, model)
    return written


def _exports(run_dir: Path, model: Any) -> None:
    import torch
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import save_file

    tensors = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    export = run_dir / "export"
    export.mkdir(exist_ok=True)
    save_file(tensors, str(export / "model.safetensors"), metadata={"step": "300"})
    hf = run_dir / "hf-export"
    hf.mkdir(exist_ok=True)
    names = sorted(tensors)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half],
              "model-00002-of-00002.safetensors": names[half:]}
    weight_map = {}
    total = 0
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(hf / shard))
        for k in keys:
            weight_map[k] = shard
            total += tensors[k].numel() * tensors[k].element_size()
    (hf / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    (hf / "config.json").write_text(json.dumps({"model_type": "drill-mlp", "hidden": 128}))
    dcp_dir = run_dir / "dcp" / "step-300"
    dcp_dir.mkdir(parents=True, exist_ok=True)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"model": {k: v.clone() for k, v in tensors.items()}},
                 checkpoint_id=str(dcp_dir), no_dist=True)
    del torch
