"""Every entry of the Lightning/Accelerate/Orbax/FSDP ``allowed_globals`` exists in the real
library and is rebuilt without running code of its own (a class without its own ``__reduce__``/
``__setstate__``, or numpy's ndarray reconstruction that Accelerate itself allows)."""

from __future__ import annotations

import importlib

import pytest

from ckptrescue.checkpoints.families.accelerate import AccelerateFamily
from ckptrescue.checkpoints.families.fsdp import FsdpDcpFamily
from ckptrescue.checkpoints.families.lightning import LightningFamily
from ckptrescue.checkpoints.families.orbax import OrbaxFamily


def resolve(qualname: str) -> object | None:
    module, _, name = qualname.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


@pytest.mark.parametrize("family", [LightningFamily, AccelerateFamily, OrbaxFamily,
                                    FsdpDcpFamily])
def test_entries_are_inert(family: type) -> None:
    import numpy as np

    for qualname in sorted(family.allowed_globals):
        obj = resolve(qualname)
        if qualname == "numpy.core.multiarray._reconstruct" and np.__version__ >= "2":
            obj = resolve("numpy._core.multiarray._reconstruct")  # numpy 2 keeps an alias
        assert obj is not None, f"{qualname} not importable"
        if qualname.endswith("multiarray._reconstruct"):
            # numpy's own ndarray pickling protocol; only allocates an empty array
            assert np.ndarray.__reduce__(np.zeros(1))[0] is obj
            continue
        assert isinstance(obj, type), qualname
        if issubclass(obj, np.ndarray | np.dtype):
            continue  # numpy's C reconstruction (Accelerate's TORCH_SAFE_GLOBALS)
        for attr in ("__reduce__", "__reduce_ex__", "__setstate__"):
            owner = next((k for k in obj.__mro__ if attr in vars(k)), object)
            assert owner in (object, dict), f"{qualname}.{attr} defined by {owner}"


def test_accelerate_mirrors_its_own_safe_globals() -> None:
    other = pytest.importorskip("accelerate.utils.other")
    names = {f"{g.__module__}.{g.__qualname__}" for g in other.TORCH_SAFE_GLOBALS}
    names.discard("_codecs.encode")  # on torch's weights-only list already
    assert names <= AccelerateFamily.allowed_globals
