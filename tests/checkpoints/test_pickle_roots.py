"""A family probe scans each rank file's ``data.pkl`` once, and answers as it did when it scanned
it twice (``formats/pickle_roots.py``).

The probe's scan runs under torch's rules in stream mode; the family's metadata readers want a
plain memory-mode scan. The root is shared only where the two build the same graph: the
equivalence is checked on real ``torch.save`` pickles of the shapes the families read (argparse
namespaces, optimizer states, shared storages, nested containers), and a scan the rules changed
(a refusal), a damaged pickle and changed bytes are never shared. Tensors come from integer
ranges; the Megatron fixture is ``fixtures/families/megatron.write_legacy``.
"""

from __future__ import annotations

import argparse
import io
import json
import pickle
import sys
import zipfile
from collections import OrderedDict
from pathlib import Path

import pytest

from ckptrescue.checkpoints.families import pickles
from ckptrescue.checkpoints.formats import pickle_roots, pickle_scan, torch_rebuild

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]


def _data_pkl(obj: object) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as z:
        return z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))


def _states() -> list[object]:
    w = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    shared = torch.arange(10, dtype=torch.int64)
    return [
        {"model": OrderedDict(w=w, b=torch.zeros(6)), "iteration": 7,
         "args": argparse.Namespace(tensor_model_parallel_size=2, lr=0.5, name="run",
                                    layers=[1, 2, (3, 4)], extra=None)},
        {"optimizer": {"state": {0: {"step": torch.tensor(3.0), "exp_avg": w.clone()}},
                       "param_groups": [{"lr": 0.25, "params": [0], "betas": (0.5, 0.75)}]}},
        {"a": shared[2:5], "b": shared[5:], "c": shared, "size": torch.Size([3, 4])},
        [{"global_steps": 12, "ds_version": "0.16.0", "flag": True}, b"bytes", 1.5, None],
    ]


@pytest.fixture(autouse=True)
def _empty() -> None:
    pickle_roots.forget()


@pytest.mark.parametrize("index", range(4))
def test_the_probe_scan_kept_gives_the_root_a_plain_scan_gives(index):
    blob = _data_pkl(_states()[index])
    probe_scan = pickle_roots.torch_scan(blob, 64)
    assert pickle_roots.rules_changed_nothing(probe_scan)
    assert pickle_roots.torch_scan(blob, 64) is probe_scan  # done once
    root = pickle_roots.plain_root(blob, 64)
    assert root is probe_scan.root
    fresh = pickle_scan.scan_pickle(blob, mode="memory", partial=True).root
    assert pickles.plain(root) == pickles.plain(fresh)
    assert pickles.plain(root) != pickles.plain(None)
    # the kept scan is the scan torch's rules give, positions and all
    again = torch_rebuild.scan_torch_pickle(blob, start=64)
    assert (probe_scan.globals, probe_scan.end, [r.key for r in probe_scan.persistent_refs]) \
        == (again.globals, again.end, [r.key for r in again.persistent_refs])
    # the same bytes at another offset: positions differ, so that is another scan
    assert pickle_roots.torch_scan(blob, 128) is not probe_scan


def test_where_the_rules_changed_the_graph_the_plain_root_is_scanned_plainly():
    class OtherIds(pickle.Pickler):
        def persistent_id(self, obj: object) -> object:
            return ("not-storage", 1) if isinstance(obj, bytearray) else None

    buf = io.BytesIO()
    OtherIds(buf, protocol=2).dump({"x": bytearray(b"ab"), "y": 3})
    blob = buf.getvalue()
    refused = pickle_roots.torch_scan(blob)
    assert refused.refusals  # torch refuses a persistent id that is not a storage
    assert not pickle_roots.rules_changed_nothing(refused)
    root = pickle_roots.plain_root(blob)
    assert root is not refused.root
    assert pickles.plain(root) == pickles.plain(
        pickle_scan.scan_pickle(blob, mode="memory", partial=True).root)
    assert pickle_roots.plain_root(blob) is root  # kept too

    torn = _data_pkl(_states()[0])
    torn = torn[: len(torn) // 2]
    with pytest.raises(pickle_scan.PickleError):
        pickle_roots.torch_scan(torn)
    with pytest.raises(pickle_scan.PickleError):  # a failed scan is not kept: it fails again
        pickle_roots.torch_scan(torn)
    assert pickles.plain(pickle_roots.plain_root(torn)) == pickles.plain(
        pickle_scan.scan_pickle(torn, mode="memory", partial=True).root)


def test_a_scan_is_found_only_by_the_same_bytes_and_the_store_stays_bounded(monkeypatch):
    blob = _data_pkl(_states()[0])
    first = pickle_roots.torch_scan(blob)
    changed = bytearray(blob)
    at = changed.index(b"run")  # the namespace's name, same length: a different pickle
    changed[at:at + 3] = b"nur"
    assert pickle_roots.torch_scan(bytes(changed)) is not first
    assert pickles.plain(pickle_roots.plain_root(bytes(changed)))["args"]["name"] == "nur"
    assert pickles.plain(pickle_roots.plain_root(blob))["args"]["name"] == "run"
    # bounded by count and by bytes: the oldest go first
    pickle_roots.forget()
    monkeypatch.setattr(pickle_roots, "KEEP", 2)
    blobs = [_data_pkl(s) for s in _states()[:3]]
    scans = [pickle_roots.torch_scan(b) for b in blobs]
    assert pickle_roots.torch_scan(blobs[2]) is scans[2]
    assert pickle_roots.torch_scan(blobs[1]) is scans[1]
    assert pickle_roots.torch_scan(blobs[0]) is not scans[0]  # the oldest was dropped
    pickle_roots.forget()
    monkeypatch.setattr(pickle_roots, "KEEP", 8)
    monkeypatch.setattr(pickle_roots, "MAX_BYTES", len(blobs[1]) + len(blobs[2]) - 1)
    one, two = pickle_roots.torch_scan(blobs[1]), pickle_roots.torch_scan(blobs[2])
    assert pickle_roots.torch_scan(blobs[2]) is two
    assert pickle_roots.torch_scan(blobs[1]) is not one  # both together were too many bytes


def test_a_family_probe_scans_each_data_pkl_once_and_answers_the_same(tmp_path, monkeypatch):
    sys.path.insert(0, str(REPO))
    try:
        from fixtures.families.megatron import write_legacy
    finally:
        sys.path.remove(str(REPO))
    from ckptrescue.checkpoints.probes.checkpoints import probe_paths

    step = write_legacy(tmp_path / "mg")
    files = sorted(step.glob("iter_*/mp_rank_*/model_optim_rng.pt"))
    assert len(files) > 2
    scans: list[int] = []  # every static scan of a pickle, rules or not
    real_scan = torch_rebuild.scan_pickle

    def counted(data, **kw):  # noqa: ANN001, ANN202
        scans.append(len(data))
        return real_scan(data, **kw)

    monkeypatch.setattr(torch_rebuild, "scan_pickle", counted)
    monkeypatch.setattr(pickle_scan, "scan_pickle", counted)
    shared = [r.to_json(with_tensors=True) for r in probe_paths([step], jobs=1)]
    shared_scans = len(scans)
    pickle_roots.forget()
    scans.clear()
    monkeypatch.setattr(pickle_roots, "_keep", lambda *a, **k: None)
    alone = [r.to_json(with_tensors=True) for r in probe_paths([step], jobs=1)]
    assert json.dumps(shared, sort_keys=True) == json.dumps(alone, sort_keys=True)
    assert shared[0]["verdict"] == "intact"
    # without sharing, the layout read, the probe and the summary each scanned a rank file's
    # pickle; with it, each distinct pickle (tensor-parallel ranks of one stage can hold the
    # very same bytes at the same offset) is scanned once
    distinct = set()
    for f in files:
        with zipfile.ZipFile(f) as z:
            info = next(i for i in z.infolist() if i.filename.endswith("data.pkl"))
            distinct.add((z.read(info), info.header_offset))
    assert shared_scans == len(distinct)
    assert len(scans) >= 2 * len(files)
