"""A DCP checkpoint written by Python 3.11.0 to 3.11.x (Debian 12's 3.11.2 among them), whose
``enum.Enum.__reduce_ex__`` pickles a member by name, ``getattr(Class, 'MEMBER')``
(``Lib/enum.py`` of those versions; later versions pickle it by value, ``Class(value)``).
Every ``.metadata`` they write then names ``builtins.getattr`` for each tensor's memory format.
DCP's reader (``pickle.load``) loads it: the kit calls it intact, loads it in the sandbox, and
still calls ``getattr`` unsafe for anything but a listed enum's own member."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ckptrescue.checkpoints.base import Verdict
from fixtures import malicious as mal

from .conftest import probe1

REPO = Path(__file__).resolve().parents[2]
ENUM = "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING"

# the writer of those interpreters, set before torch defines its enums (Lib/enum.py, 3.11.2:
# ``def __reduce_ex__(self, proto): return getattr, (self.__class__, self._name_)``)
WRITE_BY_NAME = r"""
import enum, sys, warnings
enum.Enum.__reduce_ex__ = lambda self, proto: (getattr, (self.__class__, self._name_))
import torch
import torch.distributed.checkpoint as dcp
from fixtures import malicious as mal
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    dcp.save(mal.state(), checkpoint_id=sys.argv[1])
"""

LOAD = r"""
import json, sys
from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys
sd = _load_state_dict_from_keys(checkpoint_id=sys.argv[1])
print(json.dumps({k: v.tolist() for k, v in sd["model"].items()}))
"""


@pytest.fixture(scope="module")
def by_name(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("by-name") / "ckpt"
    subprocess.run([sys.executable, "-c", WRITE_BY_NAME, str(out)], cwd=REPO, check=True,
                   env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=300)
    return out


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_intact_and_loaded_where_dcp_loads_it(by_name: Path, tmp_path: Path) -> None:
    from ckptrescue.checkpoints.formats import pickle_scan

    from .conftest import tree_hash

    scan = pickle_scan.scan_pickle((by_name / ".metadata").read_bytes())
    assert "builtins.getattr" in scan.globals and scan.getattr_only_for_members()
    assert f"{ENUM}.TORCH_CONTIGUOUS_FORMAT" in scan.member_lookups
    real = subprocess.run([sys.executable, "-c", LOAD, str(by_name)], capture_output=True,
                          text=True, timeout=300, check=True)
    assert '"w": [[0.0, 1.0, 2.0, 3.0]' in real.stdout  # the real loader loads it
    before = tree_hash(by_name)
    r = probe1(by_name, load=True)
    assert r.verdict is Verdict.INTACT, [(f.code, f.title) for f in r.findings]
    assert r.load["status"] == "ok" and r.load["result"]["tensors"] == 2, r.load
    assert tree_hash(by_name) == before


@pytest.mark.parametrize(("ops", "why"), [
    (mal.call(mal.glob("builtins", "getattr"), mal.glob(*ENUM.rsplit(".", 1)),
              mal.s("TORCH_NO_SUCH_FORMAT")), "not a member"),
    (mal.call(mal.glob("builtins", "getattr"), mal.glob(*ENUM.rsplit(".", 1)),
              mal.s("__init_subclass__")), "an attribute, not a member"),
    (mal.call(mal.glob("builtins", "getattr"),
              mal.glob("torch.distributed.checkpoint.metadata", "Metadata"), mal.s("TENSOR")),
     "a listed class that is no enum"),
    (mal.call(mal.call(mal.glob("builtins", "getattr"), mal.glob("posix", "system"),
                       mal.s("__call__")), mal.s("true")), "a call through it"),
])
def test_getattr_for_anything_else_is_unsafe(by_name: Path, tmp_path: Path, ops: bytes,
                                             why: str) -> None:
    """The checkpoint's own member lookups do not vouch for another ``getattr`` call in it."""
    ckpt = _copy(by_name, tmp_path / "ckpt")
    mal.poison_dcp(ckpt, ops)
    r = probe1(ckpt)
    assert r.verdict is Verdict.UNSAFE, why
    assert any(f.code == "PK001" and "builtins.getattr" in f.title for f in r.findings), why


def test_getattr_passed_as_data_is_no_lookup(by_name: Path, tmp_path: Path) -> None:
    """``_rebuild_from_type_v2(func, type, args, state)`` (on the exact list) calls ``func(*args)``
    itself: ``getattr`` handed to it is called with whatever follows, though it never appears
    as a call of its own. Every appearance of ``getattr`` must be a member lookup's function."""
    meta = mal.glob("torch.distributed.checkpoint.metadata", "Metadata")
    ops = mal.call(mal.glob("torch._tensor", "_rebuild_from_type_v2"),
                   mal.glob("builtins", "getattr"), mal.glob(*ENUM.rsplit(".", 1)),
                   mal.MARK + meta + mal.s("__init__") + mal.TUPLE, b"}")
    ckpt = _copy(by_name, tmp_path / "ckpt")
    mal.poison_dcp(ckpt, ops)
    r = probe1(ckpt)
    assert r.verdict is Verdict.UNSAFE
    assert any(f.code == "PK001" and "builtins.getattr" in f.title for f in r.findings)


def test_a_rewritten_enum_class_is_unsafe(by_name: Path, tmp_path: Path) -> None:
    """BUILD on the enum class sets what ``getattr(Class, 'MEMBER')`` then returns."""
    ops = (mal.glob(*ENUM.rsplit(".", 1)) + b"}" + mal.s("TORCH_CONTIGUOUS_FORMAT")
           + mal.glob("posix", "system") + b"s" + b"b")
    ckpt = _copy(by_name, tmp_path / "ckpt")
    mal.poison_dcp(ckpt, ops)
    r = probe1(ckpt)
    assert r.verdict is Verdict.UNSAFE and any(f.code == "PK010" for f in r.findings)


def test_the_sandbox_admits_getattr_only_while_the_metadata_is_read() -> None:
    """The allowance is the hook's, for the block that reads ``.metadata``: outside it (the
    byte items DCP unpickles next, any other load) ``getattr`` is refused as before."""
    from ckptrescue.sandbox_children import boundary

    boundary._State.allowed_globals = boundary.allowed_globals()  # noqa: SLF001
    event = ("builtins", "getattr")
    assert boundary._decide("pickle.find_class", event)  # noqa: SLF001
    with boundary.admitting(["builtins.getattr"]):
        assert not boundary._decide("pickle.find_class", event)  # noqa: SLF001
        assert boundary._decide("pickle.find_class", ("posix", "system"))  # noqa: SLF001
    assert boundary._decide("pickle.find_class", event)  # noqa: SLF001


def test_a_member_by_name_through_newobj_is_not_a_lookup(tmp_path: Path) -> None:
    """``NEWOBJ`` calls ``cls.__new__(cls, *args)``: with ``getattr`` as the class the real
    unpickler fails, so the arguments are no member lookup, whatever they name."""
    newobj = (mal.glob("builtins", "getattr") + mal.MARK + mal.glob(*ENUM.rsplit(".", 1))
              + mal.s("TORCH_CHANNELS_LAST") + mal.TUPLE + b"\x81")
    r = probe1(mal.dcp_dir(tmp_path / "ckpt", newobj))
    assert r.verdict is Verdict.UNSAFE
