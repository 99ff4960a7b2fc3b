"""Hugging Face ``datasets`` directories: what their JSON says against the Arrow files they hold.

Two layouts (``datasets`` 5.x):

* ``save_to_disk`` (``Dataset.save_to_disk``, read by ``load_from_disk``): ``state.json``
  (``_data_files: [{"filename": "data-00000-of-00003.arrow"}, ...]``, ``_split``, ...),
  ``dataset_info.json`` and the Arrow *stream* files; a ``DatasetDict`` adds
  ``dataset_dict.json`` (``{"splits": [...]}``) with one such directory per split.
* the builder cache (``load_dataset(..., cache_dir=...)``:
  ``<cache>/<builder>/<config>/<version>/<hash>/``): ``dataset_info.json`` whose ``splits``
  give ``num_examples`` (and ``shard_lengths`` when sharded) per split, and the files
  ``<builder>-<split>.arrow`` or ``<builder>-<split>-NNNNN-of-NNNNN.arrow``.

Checked: every file ``state.json`` lists is present and checks clean
(:mod:`~ckptrescue.datasets.arrow_ipc`); in a builder cache every shard ``NNNNN-of-NNNNN`` is
present, and each split's rows (and each shard's, against ``shard_lengths``) equal
``num_examples``. In a ``save_to_disk`` directory the split sizes of ``dataset_info.json`` are
*not* compared: they describe the dataset the saved one came from and survive ``.filter``/
``.select``. A bad record's ``key`` is the file (relative to the directory checked), ``index``
the record batch within it, ``offset`` the byte offset in it.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from ckptrescue.datasets import arrow_ipc
from ckptrescue.datasets.shardcheck import BadRecord, CheckOutcome, open_tracked, read_exact

MAX_JSON = 16 << 20
_SHARDED = re.compile(r"^(?P<stem>.+)-(?P<split>[^-]+)-(?P<k>\d{5})-of-(?P<n>\d{5})\.arrow$")
_SINGLE = re.compile(r"^(?P<stem>.+)-(?P<split>[^-]+)\.arrow$")


@dataclass
class _Json:
    obj: object = None
    problem: str | None = None


def _load_json(path: str) -> _Json:
    try:
        with open_tracked(path) as fh:
            raw = read_exact(fh, MAX_JSON + 1)
    except FileNotFoundError:
        return _Json(problem="missing")
    if len(raw) > MAX_JSON:
        return _Json(problem=f"larger than {MAX_JSON} bytes")
    try:
        return _Json(obj=json.loads(raw))
    except (ValueError, RecursionError) as exc:
        return _Json(problem=f"does not parse: {str(exc)[:200]}")


def check_dir(root: str | os.PathLike[str], *, arrow: bool = True) -> CheckOutcome:
    """Check a ``save_to_disk`` directory (or ``DatasetDict``) or a builder cache directory.
    ``arrow=False`` leaves the Arrow files' own damage to their per-file check (rows are still
    counted)."""
    out = CheckOutcome()
    root = os.fspath(root)
    _check(root, "", out, arrow)
    return out


def _check(root: str, rel: str, out: CheckOutcome, arrow: bool) -> None:
    here = os.path.join(root, rel) if rel else root
    if os.path.isfile(os.path.join(here, "dataset_dict.json")):
        dd = _load_json(os.path.join(here, "dataset_dict.json"))
        splits = dd.obj.get("splits") if isinstance(dd.obj, dict) else None
        if dd.problem or not isinstance(splits, list):
            out.bad.append(BadRecord(None, 0, _join(rel, "dataset_dict.json"),
                                     f"dataset_dict.json {dd.problem or 'has no splits list'}"))
            return
        for split in splits:
            name = str(split)
            if "/" in name or name in ("", ".", ".."):
                out.bad.append(BadRecord(None, None, _join(rel, "dataset_dict.json"),
                                         f"split name {name!r} leads outside the directory"))
            elif not os.path.isdir(os.path.join(here, name)):
                out.bad.append(BadRecord(None, None, _join(rel, name), f"split {name!r} listed "
                                         "in dataset_dict.json is missing"))
            else:
                _check(root, _join(rel, name), out, arrow)
        return
    if os.path.isfile(os.path.join(here, "state.json")):
        _check_saved(here, rel, out, arrow)
    elif os.path.isfile(os.path.join(here, "dataset_info.json")):
        _check_builder(here, rel, out, arrow)
    else:
        out.bad.append(BadRecord(None, None, rel or ".", "neither state.json nor "
                                 "dataset_info.json: not a datasets directory (or both lost)"))


def _arrow(path: str, key: str, out: CheckOutcome, arrow: bool) -> int:
    """Check one Arrow file; its clean rows."""
    part = CheckOutcome()
    with open_tracked(path) as fh:
        rows = arrow_ipc.check_rows(fh, os.stat(path).st_size, part)
    out.records += part.records
    if arrow:
        for b in part.bad:
            out.bad.append(BadRecord(b.index, b.offset, key if b.key is None else
                                     f"{key}:{b.key}", b.problem))
        if part.unchecked_reason:
            out.unchecked_reason = f"{key}: {part.unchecked_reason}"
    return rows


def _check_saved(here: str, rel: str, out: CheckOutcome, arrow: bool) -> None:
    state = _load_json(os.path.join(here, "state.json"))
    files = state.obj.get("_data_files") if isinstance(state.obj, dict) else None
    if state.problem or not isinstance(files, list):
        out.bad.append(BadRecord(None, 0, _join(rel, "state.json"), "state.json "
                                 f"{state.problem or 'has no _data_files list'}: "
                                 "load_from_disk cannot read the directory"))
        return
    for k, entry in enumerate(files):
        name = entry.get("filename") if isinstance(entry, dict) else None
        if not isinstance(name, str) or "/" in name or name in ("", ".", ".."):
            out.bad.append(BadRecord(k, None, _join(rel, "state.json"),
                                     f"_data_files entry {k} malformed: {entry!r}"[:300]))
            continue
        path = os.path.join(here, name)
        if not os.path.isfile(path):
            out.bad.append(BadRecord(None, None, _join(rel, name), f"{name} listed in "
                                     "state.json is missing: its rows are lost"))
            continue
        _arrow(path, _join(rel, name), out, arrow)


def _check_builder(here: str, rel: str, out: CheckOutcome, arrow: bool) -> None:
    info = _load_json(os.path.join(here, "dataset_info.json"))
    splits = info.obj.get("splits") if isinstance(info.obj, dict) else None
    key = _join(rel, "dataset_info.json")
    if info.problem:
        out.bad.append(BadRecord(None, 0, key, f"dataset_info.json {info.problem}"))
        return
    by_split: dict[str, list[tuple[int | None, int | None, str]]] = {}
    for name in sorted(os.listdir(here)):
        if not os.path.isfile(os.path.join(here, name)):
            continue
        m = _SHARDED.match(name)
        if m:
            by_split.setdefault(m["split"], []).append((int(m["k"]), int(m["n"]), name))
        elif m := _SINGLE.match(name):
            by_split.setdefault(m["split"], []).append((None, None, name))
    if not isinstance(splits, dict):
        for files in by_split.values():
            for _, _, name in files:
                _arrow(os.path.join(here, name), _join(rel, name), out, arrow)
        return
    stem = str(info.obj.get("dataset_name") or info.obj.get("builder_name") or "") \
        if isinstance(info.obj, dict) else ""
    for split, sinfo in splits.items():
        files = sorted(by_split.get(split, []), key=lambda t: (t[0] or 0))
        want = sinfo.get("num_examples") if isinstance(sinfo, dict) else None
        lengths = sinfo.get("shard_lengths") if isinstance(sinfo, dict) else None
        if not files:
            out.bad.append(BadRecord(None, None, _join(rel, f"{stem}-{split}*.arrow"),
                                     f"split {split!r} in dataset_info.json has no Arrow "
                                     f"file: {want} examples lost"))
            continue
        total = files[0][1]
        if total is not None:
            present = {k for k, _, _ in files}
            for k in range(total):
                if k not in present:
                    name = f"{stem}-{split}-{k:05d}-of-{total:05d}.arrow"
                    lost = lengths[k] if isinstance(lengths, list) and k < len(lengths) else "?"
                    out.bad.append(BadRecord(None, None, _join(rel, name), f"shard {k} of "
                                             f"{total} of split {split!r} is missing: {lost} "
                                             "examples lost"))
        rows = 0
        for k, _, name in files:
            got = _arrow(os.path.join(here, name), _join(rel, name), out, arrow)
            rows += got
            if isinstance(lengths, list) and k is not None and k < len(lengths) and \
                    got != lengths[k]:
                out.bad.append(BadRecord(None, None, _join(rel, name), f"holds {got} readable "
                                         f"rows, dataset_info.json shard_lengths says "
                                         f"{lengths[k]}"))
        if isinstance(want, int) and rows != want:
            out.bad.append(BadRecord(None, None, key, f"split {split!r}: the Arrow files hold "
                                     f"{rows} readable rows, dataset_info.json says {want} "
                                     "num_examples"))


def _join(rel: str, name: str) -> str:
    return f"{rel}/{name}" if rel else name


def check_path(path: str | os.PathLike[str], *, arrow: bool = False) -> CheckOutcome:
    """The check ``dataset verify`` runs for a file detected as a datasets JSON (``state.json``,
    a builder ``dataset_info.json``, ``dataset_info.json`` of a saved directory or
    ``dataset_dict.json``): its directory, once. The Arrow files' own damage is left to their
    per-file check (``arrow=False``); ``dataset_info.json`` beside a ``state.json`` and the
    split directories under a ``dataset_dict.json`` are checked through their own files."""
    p = os.fspath(path)
    here, base = os.path.split(p)
    out = CheckOutcome()
    if base == "dataset_info.json" and os.path.isfile(os.path.join(here, "state.json")):
        return out  # the state.json beside it covers the directory
    if base == "dataset_dict.json":
        dd = _load_json(p)
        splits = dd.obj.get("splits") if isinstance(dd.obj, dict) else None
        if dd.problem or not isinstance(splits, list):
            out.bad.append(BadRecord(None, 0, "dataset_dict.json",
                                     f"dataset_dict.json {dd.problem or 'has no splits list'}"))
            return out
        for split in splits:
            name = str(split)
            if "/" in name or name in ("", ".", "..") or \
                    not os.path.isdir(os.path.join(here, name)):
                out.bad.append(BadRecord(None, None, name, f"split {name!r} listed in "
                                         "dataset_dict.json is missing"))
        return out
    _check(here, "", out, arrow)
    return out
