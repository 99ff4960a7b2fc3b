"""Truncated HDF5 salvage (issue 28): every tensor not recovered is listed as lost.

The file is laid out as Keras' legacy ``save_weights`` writes it (``layer_names`` on the root,
``weight_names`` on each layer group, one dataset per weight), written by h5py; h5py itself
cannot open the cut files. A layer whose group is past the cut stands for all its weights
(``layer/*``); a file without Keras names lists each unreadable group the same way.
"""

from __future__ import annotations

import pytest

from ckptrescue.checkpoints.base import Verdict

from .conftest import probe1

LAYERS = [f"dense_{i}" for i in range(62)]


def _expected() -> list[str]:
    return [f"{layer}/{layer}/{w}:0" for layer in LAYERS for w in ("kernel", "bias", "scale")]


@pytest.fixture(scope="module")
def legacy_h5(tmp_path_factory) -> bytes:
    import h5py
    import numpy as np

    path = tmp_path_factory.mktemp("h5") / "legacy.h5"
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = [n.encode() for n in LAYERS]
        f.attrs["backend"] = b"tensorflow"
        for li, layer in enumerate(LAYERS):
            g = f.create_group(layer)
            names = [f"{layer}/{w}:0".encode() for w in ("kernel", "bias", "scale")]
            g.attrs["weight_names"] = names
            for k, w in enumerate(names):
                shape = (64, 32) if k == 0 else (32,)
                g.create_dataset(w.decode(), data=np.arange(int(np.prod(shape)),
                                                            dtype=np.float32).reshape(shape) + li)
    return path.read_bytes()


def _covered(name: str, lost: list[str]) -> bool:
    """``name`` is lost by name, under a lost group (``group/*``) or with the root (``*``)."""
    return name in lost or "*" in lost or any(
        x.endswith("/*") and name.startswith(x[:-1]) for x in lost)


@pytest.mark.parametrize("fraction", [0.3, 0.6, 0.9, 0.97])
def test_every_tensor_not_recovered_is_listed_as_lost(legacy_h5, tmp_path, fraction):
    import h5py

    from ckptrescue.checkpoints.salvage import salvage

    (tmp_path / "in").mkdir()
    cut = tmp_path / "in" / "cut.h5"
    cut.write_bytes(legacy_h5[: int(len(legacy_h5) * fraction)])
    with pytest.raises(OSError):
        h5py.File(cut, "r")  # the real library cannot open it
    assert probe1(cut).verdict is Verdict.TRUNCATED
    res = salvage(cut, tmp_path / "out")
    lost = [x["name"] for x in res.lost]
    recovered = set(res.recovered)
    assert recovered <= set(_expected())
    unaccounted = [n for n in _expected() if n not in recovered and not _covered(n, lost)]
    assert not unaccounted, (len(recovered), lost[:5], unaccounted[:5])
    assert not res.clean
    # nothing is listed twice: a lost layer is not also recovered
    assert not any(_covered(n, lost) for n in recovered)


def test_without_keras_names_each_unreadable_group_is_lost(tmp_path):
    import h5py
    import numpy as np

    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        for i in range(40):
            f.create_dataset(f"block{i}/w", data=np.arange(2048, dtype=np.float32) + i)
    data = path.read_bytes()
    (tmp_path / "in").mkdir()
    cut = tmp_path / "in" / "cut.h5"
    cut.write_bytes(data[: int(len(data) * 0.5)])
    from ckptrescue.checkpoints.salvage import salvage

    res = salvage(cut, tmp_path / "out")
    lost = [x["name"] for x in res.lost]
    named = [f"block{i}/w" for i in range(40)]
    assert all(n in res.recovered or _covered(n, lost) for n in named), (res.recovered, lost)
    assert not res.clean
