"""Every entry of the DeepSpeed and Megatron ``allowed_globals`` exists in the real library and is
rebuilt without running code of its own: a class without its own ``__reduce__``/``__reduce_ex__``/
``__setstate__`` (plain ``__dict__`` state, a dataclass, ``argparse.Namespace``), an Enum looked
up by value, or numpy's array reconstruction. And the lists are what the libraries really
pickle: every global a real saved file names beyond torch's weights-only list is on its list."""

from __future__ import annotations

import enum
import importlib
from pathlib import Path

import pytest
from f1_build import built

from ckptrescue.checkpoints.base import ProbeOptions
from ckptrescue.checkpoints.families.deepspeed import DeepSpeedFamily
from ckptrescue.checkpoints.families.megatron import MegatronDistFamily, MegatronFamily
from ckptrescue.checkpoints.formats.pickle_policy import dangerous
from ckptrescue.checkpoints.formats.torch_zip import TorchZipFormat


def resolve(qualname: str) -> object | None:
    module, _, name = qualname.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


@pytest.mark.parametrize("family", [DeepSpeedFamily, MegatronFamily, MegatronDistFamily])
def test_entries_are_inert(family: type) -> None:
    pytest.importorskip("deepspeed" if family is DeepSpeedFamily else "megatron.core")
    import numpy as np

    for qualname in sorted(family.allowed_globals):
        assert not dangerous(qualname), qualname
        obj = resolve(qualname)
        assert obj is not None, f"{qualname} not importable"
        if qualname.endswith("multiarray._reconstruct"):
            # numpy's own ndarray pickling protocol: allocates an empty array, nothing else
            assert np.ndarray.__reduce__(np.zeros(1))[0] is obj
            continue
        assert isinstance(obj, type), qualname
        if issubclass(obj, np.ndarray | np.dtype):
            continue  # numpy's C reconstruction (megatron.core.safe_globals lists them)
        if issubclass(obj, enum.Enum):
            continue  # unpickled as Enum(value): a lookup
        for attr in ("__reduce__", "__reduce_ex__", "__setstate__"):
            owner = next((k for k in obj.__mro__ if attr in vars(k)), object)
            assert owner in (object, dict), f"{qualname}.{attr} defined by {owner}"


def test_megatron_list_mirrors_its_safe_globals() -> None:
    sg = pytest.importorskip("megatron.core.safe_globals")
    theirs = {f"{g.__module__}.{g.__qualname__}" for g in sg.SAFE_GLOBALS}
    left_out = {"io.BytesIO", "_io.BytesIO", "signal.Signals", "types.SimpleNamespace",
                "pathlib.PosixPath"}
    for name in MegatronFamily.allowed_globals - {"numpy.core.multiarray._reconstruct"}:
        obj = resolve(name)
        assert any(resolve(t) is obj for t in theirs), f"{name} is not in megatron's list"
    assert all(resolve(t) in {resolve(n) for n in MegatronFamily.allowed_globals}
               or t in left_out for t in theirs)


@pytest.mark.parametrize(("lib", "family"), [("deepspeed", DeepSpeedFamily),
                                             ("megatron", MegatronFamily)])
def test_real_files_name_only_listed_globals(lib: str, family: type) -> None:
    pytest.importorskip("deepspeed" if lib == "deepspeed" else "megatron.core")
    named: set[str] = set()
    for path in sorted(built(lib).rglob("*.pt")):
        report = TorchZipFormat.probe(Path(path), ProbeOptions(numeric=False))
        named |= set(report.extra.get("unsafe_globals", []))
    assert named, "the real files name globals beyond torch's list (else this test is vacuous)"
    assert named <= family.allowed_globals, sorted(named - family.allowed_globals)
