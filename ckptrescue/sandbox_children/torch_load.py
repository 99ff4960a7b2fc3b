"""Sandbox child: the real loaders (torch.load weights_only, safetensors, DCP) on one checkpoint.

Run only through ``effects.sandbox.run_child("torch_load", request)`` (bubblewrap, seccomp,
audit hook: see ``boundary.py``); request keys: ``path``, ``loader`` (torch, safetensors, dcp,
hf-sharded, family) and ``files``; ``family`` also takes ``members`` (``rank``, ``path``,
``loader`` each) and ``allowed_globals`` (the family's exact list: registered as safe by
qualified name, ``safe_globals.py``) and answers per rank file. Prints one JSON object:
``ok``, the number of tensors and non-finite values and ``map`` (each tensor's dtype, shape and
a SHA-256 prefix of its bytes, compared by the parent with the static map) on success, else the
exception class and message. ``torch.load`` always gets ``weights_only=True,
map_location="cpu"``; DCP's reader unpickles ``.metadata`` (and its byte items) without
weights_only, so in this child every global an unpickler resolves must be on the kit's exact
list (the audit hook refuses the rest).
DCP's ``CheckpointException`` derives from BaseException, hence the broad catch (a
``SystemExit`` raised during the load is a result too).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from ckptrescue.checkpoints.formats.pickle_scan import unique_names
from ckptrescue.model import JsonObject
from ckptrescue.sandbox_children import boundary


def _nonfinite(item: Any) -> int:
    """Non-finite values of one loaded tensor (0 where torch cannot count them: a sparse
    layout's values are counted, a dtype with no kernels - float4 - is not)."""
    import torch

    if item.layout in (torch.sparse_coo,):
        item = item.coalesce().values()
    elif item.layout != torch.strided:
        item = item.values()
    if not (item.is_floating_point() or item.is_complex()) or not item.numel():
        return 0
    try:
        if item.element_size() == 1:  # float8 kinds: isfinite is not implemented
            item = item.to(torch.float32)
        return int((~torch.isfinite(item)).sum())
    except (RuntimeError, NotImplementedError, TypeError):
        return 0


def _count(obj: Any, acc: dict[str, int]) -> None:
    import torch

    todo = [obj]
    while todo:
        item = todo.pop()
        if isinstance(item, torch.Tensor):
            acc["tensors"] += 1
            acc["nonfinite"] += _nonfinite(item)
        elif isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, (list, tuple)):
            todo.extend(item)


MAX_MAPPED = 200_000  # tensors described in ``map`` (a bigger checkpoint is compared in part)


def tensor_map(obj: Any) -> dict[str, list[Any]]:
    """``{name: [dtype, shape, sha256 prefix of the C-order bytes]}`` of every tensor in the
    loaded object, named as the static map names them (dict keys and list/tuple indices joined
    with dots: ``pickle_scan.iter_named``, colliding names numbered alike)."""
    import torch

    out: dict[str, list[Any]] = {}
    for name, item in unique_names(_walk_tensors(obj)):
        if len(out) >= MAX_MAPPED:
            break
        if item.layout != torch.strided or item.is_quantized or item.is_meta:
            continue
        digest = _digest(item)
        if digest is not None:
            out[name or "<root>"] = [str(item.dtype).removeprefix("torch."),
                                     list(item.shape), digest]
    return out


def _walk_tensors(obj: Any) -> Any:
    """``(name, tensor)`` in the static map's walk order (``pickle_scan.iter_named``: depth
    first, children in order), so that colliding names get the same ``#n`` on both sides."""
    import torch

    todo: list[tuple[str, Any, int]] = [("", obj, 0)]
    while todo:
        name, item, depth = todo.pop()
        if isinstance(item, torch.Tensor):
            yield name, item
        elif depth < 64 and isinstance(item, dict):
            todo.extend(reversed([(f"{name}.{k}" if name else str(k), v, depth + 1)
                                  for k, v in item.items()]))
        elif depth < 64 and isinstance(item, (list, tuple)):
            todo.extend(reversed([(f"{name}.{i}" if name else str(i), v, depth + 1)
                                  for i, v in enumerate(item)]))


MAX_DESCRIBED_BYTES = 1 << 32  # a view torch expands beyond this (stride 0) is not described


def _digest(item: Any) -> str | None:
    """SHA-256 prefix of the values the loaded tensor holds, as C-order bytes: a conjugate or
    negative view resolved first (torch keeps the stored bytes and a bit); None when they
    cannot be had (a dtype without a copy kernel that is not contiguous, a broadcast view too
    big to materialise) - that tensor is then not compared, never a load failure."""
    import hashlib

    import torch

    try:
        item = item.detach().resolve_conj().resolve_neg()
        if item.numel() * item.element_size() > MAX_DESCRIBED_BYTES:
            return None
        raw = item.contiguous().reshape(-1).view(torch.uint8).numpy()
    except (RuntimeError, NotImplementedError, TypeError, ValueError):
        return None
    return hashlib.sha256(memoryview(raw)).hexdigest()[:16]


def _load(req: dict[str, Any]) -> Any:
    loader, path = req["loader"], req["path"]
    if loader == "torch":
        import torch

        return torch.load(path, weights_only=True, map_location="cpu")
    if loader == "safetensors":
        from safetensors.torch import load_file

        return load_file(path, device="cpu")
    if loader == "hf-sharded":
        from safetensors.torch import load_file

        out: dict[str, Any] = {}
        for f in req.get("files", []):
            if f.endswith(".safetensors"):
                out.update(load_file(f, device="cpu"))
            elif f.endswith((".bin", ".pt", ".pth")):
                import torch

                out.update(torch.load(f, weights_only=True, map_location="cpu"))
        return out
    if loader == "dcp":
        from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys

        with _metadata_admitting(req.get("hook_globals", ())):
            return _load_state_dict_from_keys(checkpoint_id=path)
    raise ValueError(f"unknown loader {loader}")


@contextlib.contextmanager
def _metadata_admitting(names: Any) -> Iterator[None]:
    """While DCP's reader unpickles ``.metadata`` (``FileSystemReader.read_metadata``), and
    then only, the hook admits ``names`` (:func:`boundary.admitting`)."""
    if not names:
        yield
        return
    from torch.distributed.checkpoint.filesystem import FileSystemReader

    real = FileSystemReader.read_metadata

    def read_metadata(self: Any, *args: Any, **kwargs: Any) -> Any:
        with boundary.admitting(names):
            return real(self, *args, **kwargs)

    FileSystemReader.read_metadata = read_metadata  # type: ignore[method-assign]
    try:
        yield
    finally:
        FileSystemReader.read_metadata = real  # type: ignore[method-assign]


def _load_family(req: dict[str, Any]) -> dict[str, Any]:
    """Every rank file of a family step, each with its own loader; ``torch.load`` gets the
    family's exact globals registered as safe by qualified name (``safe_globals.py``). A name
    that cannot be registered skips the torch loads (never ``weights_only=False``)."""
    import torch

    from ckptrescue.sandbox_children.safe_globals import resolve

    pairs, missing = resolve(list(req.get("allowed_globals", [])))
    if missing:
        return {"ok": False, "skipped": True, "unresolved": missing,
                "message": "the family's safe globals cannot be registered: "
                + "; ".join(f"{k}: {v}" for k, v in sorted(missing.items())[:4])}
    if pairs:
        torch.serialization.add_safe_globals(pairs)
    results: list[dict[str, Any]] = []
    for member in req.get("members", []):
        acc = {"tensors": 0, "nonfinite": 0}
        try:
            obj = _load({"loader": member["loader"], "path": member["path"],
                         "files": [member["path"]], "hook_globals": req.get("hook_globals", [])})
            _count(obj, acc)
            del obj
            results.append({"rank": member["rank"], "path": member["path"], "ok": True, **acc})
        except BaseException as exc:  # noqa: BLE001 - every outcome is a result here
            results.append({"rank": member["rank"], "path": member["path"],
                            **boundary.failure(exc, 300)})
    bad = [r for r in results if not r["ok"]]
    return {"ok": not bad, "members": results, "tensors": sum(r.get("tensors", 0)
                                                              for r in results),
            "refused": len(bad), "registered": sorted(n for _o, n in pairs)}


WARM = True  # a warm zygote may make these imports once and fork a child per load
PREPARE_KEYS = ("loader",)  # what of a request the zygote's ``prepare`` sees (no path)


def prepare(req: JsonObject) -> None:
    """The heavy imports, before the boundary closes (seccomp kills exec, not imports); a warm
    zygote (``zygote.py``) makes them before it forks."""
    import torch  # noqa: F401

    loader = str(req.get("loader"))
    if loader in ("safetensors", "hf-sharded", "family"):
        import safetensors.torch  # noqa: F401
    if loader in ("dcp", "family"):
        import torch.distributed.checkpoint.default_planner  # noqa: F401
        import torch.distributed.checkpoint.filesystem  # noqa: F401
        import torch.distributed.checkpoint.state_dict_loader  # noqa: F401
    import torch._weights_only_unpickler  # noqa: F401


def main() -> None:
    req = boundary.start()
    prepare(req)
    boundary.enter(req)
    try:
        if req.get("loader") == "family":
            result: dict[str, Any] = _load_family(req)
        else:
            obj = _load(req)
            acc = {"tensors": 0, "nonfinite": 0}
            _count(obj, acc)
            result = {"ok": True, **acc, "map": tensor_map(obj)}
    except BaseException as exc:  # noqa: BLE001 - every outcome is a result here
        result = boundary.failure(exc)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
