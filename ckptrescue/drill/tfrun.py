"""The drill's TensorFlow checkpoints, written by tensorflow-cpu in a child process (the import
is slow and heavy; the drill's own process never imports TensorFlow) while the drill trains its
torch run: ``start`` it, ``finish`` waits for it.

``python -m ckptrescue.drill.tfrun OUT_DIR`` trains a tiny Keras model for two steps and saves a
``tf.train.Checkpoint`` (model + Adam slots) after each, through a CheckpointManager.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ckptrescue import imports_kept
from ckptrescue.errors import ToolFailedError

if TYPE_CHECKING:
    from ckptrescue.effects.runner import InternalRun


def available() -> bool:
    return importlib.util.find_spec("tensorflow") is not None


def start(out_dir: Path, *, timeout_s: float = 300.0) -> InternalRun:
    """Start writing the checkpoints into ``out_dir``: the child runs while the drill trains its
    torch run (its import of TensorFlow alone is seconds of CPU), and dies with the thread that
    started it. :func:`finish` waits for it; on any error before that, ``.stop()`` it."""
    from ckptrescue.effects.runner import SubprocessRunner, dies_with_this_thread

    return SubprocessRunner(None).start_internal(
        [sys.executable, "-m", "ckptrescue.drill.tfrun", str(out_dir)],
        purpose="drill: write TensorFlow checkpoints", timeout_s=timeout_s,
        env_extra={"TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""},
        preexec=dies_with_this_thread())


def finish(job: InternalRun) -> None:
    """Wait for the child :func:`start` started; a one-line error when it failed."""
    res = job.wait()
    if res.returncode != 0:
        tail = res.stderr.strip().splitlines()[-1:] or ["no output"]
        raise ToolFailedError(f"writing the drill's TensorFlow checkpoint failed: {tail[0]}")


def main() -> None:
    with imports_kept():  # 1.6 of this child's 4.7 CPU-s went to collections without it
        import tensorflow as tf

        layers = tf.keras.layers  # Keras is imported on first use: here, among the imports kept

    out = Path(sys.argv[1])
    tf.random.set_seed(3)
    model = tf.keras.Sequential([tf.keras.Input((8,)), layers.Dense(16, activation="relu"),
                                 layers.Dense(4)])
    opt = tf.keras.optimizers.Adam(1e-3)
    ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
    manager = tf.train.CheckpointManager(ckpt, str(out), max_to_keep=5)
    for _ in range(2):
        x = tf.random.normal((32, 8))
        y = tf.random.normal((32, 4))
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        manager.save()


if __name__ == "__main__":
    import ckptrescue

    ckptrescue.own_process = True  # the drill's child: nothing else runs in it
    main()
