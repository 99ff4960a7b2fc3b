"""What torch's DCP load requires of ``.metadata`` beyond parsing (pure; reads the inert scan).

A byte changed inside a field name, a key or a memo reference still parses as a pickle, but the
load then fails (torch 2.13 ``torch/distributed/checkpoint``; found by flipping every byte of a
real ``.metadata`` and loading each through Lightning's ``_load_distributed_checkpoint``). The
rules below are the loader's own, each with where it fails:

* every dataclass has its fields without a default (``metadata.py``: ``Metadata.
  state_dict_metadata``; ``TensorStorageMetadata.properties/size/chunks``;
  ``ChunkStorageMetadata.offsets/sizes``; ``MetadataIndex.fqn``; ``filesystem._StorageInfo.
  relative_path/offset/length``): else ``AttributeError`` when the planner or reader reads it;
* ``TensorProperties`` state is its ``__getstate__`` 5-tuple with a ``_MEM_FORMAT_ENCODING`` of
  0, 1 or 2 (``__setstate__``: "Invalid torch.memory_format encoding") and a ``torch`` dtype
  (``torch.empty(size, dtype=...)``: ``TypeError`` otherwise); its layout and flags are never
  read by the load;
* ``state_dict_metadata`` keys are strings, no ``planner_data`` key is a DCP dataclass (those
  are unhashable: "unhashable type" while unpickling); ``serialization._get_layout`` gets a
  layout torch has (it runs while unpickling); sizes, offsets and storage offsets/lengths are
  non-negative ints;
* ``planner_data[k]`` is the path the load planner nests ``k`` under, and the planner flattens
  it back with ``".".join(map(str, path))`` (``_nested_dict.flatten_state_dict``): the result must
  be ``k`` again ("Missing key in checkpoint state_dict", or two keys collapsing into one:
  "Size mismatch", or — same sizes — one entry silently loaded in place of another, which the
  load does not notice: called damage here all the same);
* every ``BytesStorageMetadata`` entry has its ``storage_data`` item (``MetadataIndex(fqn)``):
  the reader looks it up (``KeyError``). Tensor chunks without an item are ``dcp.py``'s DC005.
"""

from __future__ import annotations

from typing import Any

from ckptrescue.checkpoints.formats import pickle_scan
from ckptrescue.model import JsonObject

_M = "torch.distributed.checkpoint.metadata."
REQUIRED: dict[str, tuple[str, ...]] = {
    _M + "Metadata": ("state_dict_metadata",),
    _M + "TensorStorageMetadata": ("properties", "size", "chunks"),
    _M + "ChunkStorageMetadata": ("offsets", "sizes"),
    _M + "MetadataIndex": ("fqn",),
    "torch.distributed.checkpoint.filesystem._StorageInfo": ("relative_path", "offset", "length"),
}
KNOWN_FIELDS: dict[str, frozenset[str]] = {
    _M + "Metadata": frozenset({"state_dict_metadata", "planner_data", "storage_data",
                                "storage_meta", "version"}),
    _M + "TensorStorageMetadata": frozenset({"properties", "size", "chunks"}),
    _M + "ChunkStorageMetadata": frozenset({"offsets", "sizes"}),
    _M + "MetadataIndex": frozenset({"fqn", "offset", "index"}),
    "torch.distributed.checkpoint.filesystem._StorageInfo": frozenset({
        "relative_path", "offset", "length", "transform_descriptors"}),
}
LAYOUTS = frozenset({"torch.strided", "torch.sparse_coo", "torch.sparse_csr", "torch.sparse_csc",
                     "torch.sparse_bsr", "torch.sparse_bsc", "torch._mkldnn", "torch.jagged"})
# dataclasses with eq and without frozen: __hash__ is None, a dict key of one fails to unpickle
UNHASHABLE = frozenset({_M + "TensorStorageMetadata", _M + "BytesStorageMetadata",
                        _M + "ChunkStorageMetadata", _M + "TensorProperties", _M + "StorageMeta",
                        _M + "Metadata", "torch.distributed.checkpoint.filesystem._StorageInfo"})
MAX_PROBLEMS = 16


def _unhashable(key: Any) -> bool:
    return isinstance(key, pickle_scan.Call) and key.qualname in UNHASHABLE


def _state(obj: Any) -> JsonObject | None:
    state = obj.merged_state if isinstance(obj, pickle_scan.Call) else None
    return state if isinstance(state, dict) else None


def _ints(value: Any) -> bool:
    if isinstance(value, pickle_scan.Call) and value.qualname == "torch.Size" and value.args:
        value = value.args[0]
    return isinstance(value, (tuple, list)) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)


def _fields(obj: Any, where: str, out: list[str]) -> JsonObject | None:
    """The object's field state when it is the dataclass the loader expects, else a problem."""
    if not isinstance(obj, pickle_scan.Call):
        out.append(f"{where}: a {type(obj).__name__} where a DCP dataclass belongs")
        return None
    qual = obj.qualname
    state = _state(obj)
    if state is None:
        state = {}
    missing = [f for f in REQUIRED.get(qual, ()) if f not in state]
    if missing:
        unknown = sorted(str(k) for k in state if k not in KNOWN_FIELDS.get(qual, state))
        out.append(f"{where}: {qual.rsplit('.', 1)[-1]} without its field(s) "
                   f"{', '.join(missing)}" + (f" (unknown: {', '.join(unknown[:4])})"
                                              if unknown else ""))
        return None
    return state


def _properties(props: Any, where: str, out: list[str]) -> None:
    state = props.state if isinstance(props, pickle_scan.Call) else None
    if not isinstance(props, pickle_scan.Call) or not props.qualname.endswith(
            "TensorProperties"):
        out.append(f"{where}: properties is not TensorProperties")
        return
    if isinstance(state, dict):  # a dict state (no __setstate__ tuple): torch < 2.2 layout
        dtype = state.get("dtype")
    elif isinstance(state, tuple) and len(state) == 5:
        # layout, requires_grad and pin_memory are never read by the load (torch.empty takes
        # the size and dtype only): a wrong one there loads
        dtype, layout, _grad, mem, _pin = state
        if isinstance(layout, pickle_scan.Call) and layout.qualname.endswith("._get_layout") \
                and (not layout.args or layout.args[0] not in LAYOUTS):
            # serialization._get_layout(name) runs while unpickling: an unknown name fails
            out.append(f"{where}: layout {layout.args[0] if layout.args else None!r:.40} is "
                       "not a torch layout")
        enc = mem.args[0] if isinstance(mem, pickle_scan.Call) and mem.args else None
        if not (isinstance(mem, pickle_scan.Call) and mem.qualname.endswith(
                "_MEM_FORMAT_ENCODING") and enc in (0, 1, 2)):
            out.append(f"{where}: invalid memory_format encoding")
    else:
        out.append(f"{where}: TensorProperties state is not its 5-tuple")
        return
    if not (isinstance(dtype, pickle_scan.Global) and dtype.module == "torch"):
        out.append(f"{where}: dtype {dtype!r} is not a torch dtype")


def problems(root: Any) -> list[str]:
    """Why torch's DCP load of this ``Metadata`` (the inert scan's root) would fail; [] if it
    would not on these grounds."""
    out: list[str] = []
    meta = _fields(root, ".metadata", out)
    if meta is None:
        return out
    sdm = meta.get("state_dict_metadata")
    if not isinstance(sdm, dict):
        return [".metadata: state_dict_metadata is not a dict"]
    bytes_keys: list[str] = []
    for key, entry in sdm.items():
        if len(out) >= MAX_PROBLEMS:
            break
        if not isinstance(key, str):
            out.append(f"state_dict_metadata key {key!r:.60} is not a string")
            continue
        qual = entry.qualname if isinstance(entry, pickle_scan.Call) else ""
        if qual == _M + "BytesStorageMetadata":
            bytes_keys.append(key)
            continue
        state = _fields(entry, key, out)
        if state is None:
            continue
        if not _ints(state.get("size")):
            out.append(f"{key}: size is not a list of non-negative ints")
        _properties(state.get("properties"), key, out)
        chunks = state.get("chunks")
        if not isinstance(chunks, list):
            out.append(f"{key}: chunks is not a list")
            continue
        for i, chunk in enumerate(chunks):
            cs = _fields(chunk, f"{key} chunk {i}", out)
            if cs is not None and not (_ints(cs.get("offsets")) and _ints(cs.get("sizes"))):
                out.append(f"{key} chunk {i}: offsets/sizes are not non-negative ints")
    planner = meta.get("planner_data")
    if isinstance(planner, dict):
        for key in sdm:
            if not isinstance(key, str) or key not in planner:
                continue
            path = planner[key]
            if not isinstance(path, (tuple, list)) or not all(
                    isinstance(p, (str, int)) and not isinstance(p, bool) for p in path):
                out.append(f"planner_data[{key!r}] is not a path of names and indices")
            elif ".".join(map(str, path)) != key:
                out.append(f"planner_data[{key!r}] = {list(path)!r:.80} flattens to "
                           f"{'.'.join(map(str, path))!r:.80}, not the key")
        bad = [k for k in planner if _unhashable(k)]
        if bad:
            out.append(f"planner_data key is a {bad[0].qualname.rsplit('.', 1)[-1]} "
                       "(unhashable: the unpickler fails)")
    elif planner is not None:
        out.append("planner_data is neither a dict nor None")
    storage = meta.get("storage_data")
    found: set[str] = set()
    if isinstance(storage, dict):
        for index, info in storage.items():
            if len(out) >= MAX_PROBLEMS:
                break
            idx = _fields(index, "storage_data key", out)
            if idx is None:
                continue
            fqn = idx.get("fqn")
            if not isinstance(fqn, str):
                out.append(f"storage_data key: fqn {fqn!r:.60} is not a string")
                continue
            if idx.get("offset") is None:
                found.add(fqn)
            st = _fields(info, f"storage_data[{fqn}]", out)
            if st is None:
                continue
            rel, off, length = st.get("relative_path"), st.get("offset"), st.get("length")
            if not isinstance(rel, str) or not all(
                    isinstance(v, int) and not isinstance(v, bool) and v >= 0
                    for v in (off, length)):
                out.append(f"storage_data[{fqn}]: relative_path/offset/length are not a file "
                           "name and non-negative ints")
    elif storage is not None:
        out.append("storage_data is not a dict")
    if isinstance(storage, dict):
        lost = [k for k in bytes_keys if k not in found]
        if lost:
            out.append(f"{len(lost)} non-tensor entr(ies) without a storage item: "
                       + ", ".join(lost[:4]))
    return out[:MAX_PROBLEMS]
