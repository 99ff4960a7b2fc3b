"""The silent drill's training run: ``torch.save`` checkpoints shaped like a real training
checkpoint, whose one layer froze at the first of them while the rest of the model trained.

Each ``step-N.pt`` holds ``model`` (a small GPT's state dict, nanoGPT naming, ``bias=False``),
``optimizer`` (``torch.optim.AdamW.state_dict()``'s layout: ``state.<i>.step`` / ``exp_avg`` /
``exp_avg_sq`` and ``param_groups``), ``lr_scheduler`` (``LambdaLR.state_dict()``'s layout:
linear decay), ``global_step``, ``epoch`` and ``config``.

Deterministic and CPU-independent: every tensor value is an integer from SplitMix64 scaled by a
power of two (exact in float32; integer tensor arithmetic only, no optimizer math, no
``torch.randn``); the learning rate is ``(4096 - step) * 2**-22``, exact. ``torch.save`` of equal
values under an equal file name writes equal bytes.

The fault: the run was resumed at :data:`FROZEN_AT` with ``requires_grad=False`` left on
:data:`FROZEN` (a fine-tuning config that froze it). From that step on its weight is bit-identical
in every checkpoint, and, as in PyTorch (a parameter without a gradient is skipped by
``optimizer.step()``), so is its Adam state — ``step`` counter included — while every other
parameter and its state move.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ckptrescue.drill.silent_data import SplitMix64
from ckptrescue.model import JsonObject

STEPS = (1000, 1200, 1400, 1600)
FROZEN_AT = STEPS[0]
N_EMBD, N_LAYER, BLOCK, VOCAB = 32, 2, 64, 256
FROZEN = "transformer.h.1.mlp.c_fc.weight"
TOTAL_STEPS = 4096  # the linear decay reaches 0 here


def shapes() -> dict[str, tuple[int, ...]]:
    """The model's parameters in ``model.parameters()`` order (their optimizer indices)."""
    out: dict[str, tuple[int, ...]] = {"transformer.wte.weight": (VOCAB, N_EMBD),
                                       "transformer.wpe.weight": (BLOCK, N_EMBD)}
    for i in range(N_LAYER):
        p = f"transformer.h.{i}."
        out.update({p + "ln_1.weight": (N_EMBD,), p + "attn.c_attn.weight": (3 * N_EMBD, N_EMBD),
                    p + "attn.c_proj.weight": (N_EMBD, N_EMBD), p + "ln_2.weight": (N_EMBD,),
                    p + "mlp.c_fc.weight": (4 * N_EMBD, N_EMBD),
                    p + "mlp.c_proj.weight": (N_EMBD, 4 * N_EMBD)})
    out["transformer.ln_f.weight"] = (N_EMBD,)
    return out


def _ints(seed: int, n: int, lo: int, hi: int) -> list[int]:
    rng = SplitMix64(seed)
    return [rng.between(lo, hi) for _ in range(n)]


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


class _Param:
    """A parameter's integer trajectory: θ_k = (offset + 64·base + k·delta) · 2^-16 (below 2^17
    in magnitude: exact in float32), Adam moments ``(m + k) · 2^-20``."""

    def __init__(self, index: int, name: str, shape: tuple[int, ...]) -> None:
        import torch

        n = _numel(shape)
        self.shape = shape
        self.offset = 65536 if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")) else 0
        self.base = torch.tensor(_ints(3 * index + 1, n, -512, 512), dtype=torch.int64)
        self.delta = torch.tensor(_ints(3 * index + 2, n, -16, 17), dtype=torch.int64)
        self.moment = torch.tensor(_ints(3 * index + 3, n, 1, 64), dtype=torch.int64)

    def _scaled(self, ints: Any, shift: int) -> Any:
        import torch

        return (ints.to(torch.float32) / float(1 << shift)).reshape(self.shape)

    def value(self, k: int) -> Any:
        return self._scaled(self.offset + self.base * 64 + self.delta * k, 16)

    def exp_avg(self, k: int) -> Any:
        return self._scaled(self.moment - 32 + k, 20)

    def exp_avg_sq(self, k: int) -> Any:
        return self._scaled(self.moment + k, 20)


def lr_at(step: int) -> float:
    """The learning rate after ``step`` steps: ``2**-10 * (1 - step/4096)``, exactly."""
    return (TOTAL_STEPS - step) / float(1 << 22)


def checkpoint(params: dict[str, _Param], k: int, step: int) -> JsonObject:
    """The checkpoint saved after ``step`` steps (``k``: its index in :data:`STEPS`)."""
    import torch

    model: dict[str, Any] = {}
    state: dict[int, dict[str, Any]] = {}
    for i, (name, p) in enumerate(params.items()):
        kk, at = (0, FROZEN_AT) if name == FROZEN else (k, step)
        model[name] = p.value(kk)
        state[i] = {"step": torch.tensor(float(at)), "exp_avg": p.exp_avg(kk),
                    "exp_avg_sq": p.exp_avg_sq(kk)}
    lr = lr_at(step)
    return {
        "model": model,
        "optimizer": {"state": state, "param_groups": [{
            "lr": lr, "betas": (0.9, 0.95), "eps": 1e-08, "weight_decay": 0.1,
            "amsgrad": False, "maximize": False, "foreach": None, "capturable": False,
            "differentiable": False, "fused": None, "initial_lr": 2.0 ** -10,
            "params": list(range(len(params)))}]},
        "lr_scheduler": {"base_lrs": [2.0 ** -10], "last_epoch": step, "verbose": False,
                         "_step_count": step + 1, "_get_lr_called_within_step": False,
                         "_last_lr": [lr], "lr_lambdas": [None]},
        "global_step": step,
        "epoch": 0,
        "config": {"n_layer": N_LAYER, "n_embd": N_EMBD, "block_size": BLOCK,
                   "vocab_size": VOCAB, "bias": False, "dropout": 0.0},
    }


def write_run(directory: Path) -> list[Path]:
    """Write ``step-N.pt`` for every step of :data:`STEPS`; returns the paths."""
    import torch

    directory.mkdir(parents=True, exist_ok=True)
    params = {name: _Param(i, name, shape) for i, (name, shape) in enumerate(shapes().items())}
    paths = []
    for k, step in enumerate(STEPS):
        path = directory / f"step-{step}.pt"
        torch.save(checkpoint(params, k, step), path)
        paths.append(path)
    return paths


def expected() -> list[JsonObject]:
    """The training-state findings an analysis of the run must report."""
    return [{"kind": "frozen-layer", "code": "TS001", "tensor": f"model.{FROZEN}",
             "step": FROZEN_AT, "checkpoints": [f"step-{s}.pt" for s in STEPS],
             "what": f"{FROZEN} bit-identical from step {FROZEN_AT} on (requires_grad=False "
                     "left on after the resume) while every other parameter trains"}]
