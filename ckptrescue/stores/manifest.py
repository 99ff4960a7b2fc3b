"""Known-good manifests for ``store|s3 history --manifest`` and ``store|s3 restore --manifest``
(pure).

Accepted: ``sha256sum`` output (``<64 hex>  <path>`` or ``<64 hex> *<path>``), or JSON — a
``{path: sha256}`` mapping, a list of ``{"path"/"key"/"name", "sha256"}`` objects, or an object
holding such a list under ``files``/``entries``/``objects`` (the kit's own manifests).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ckptrescue.errors import UsageError

_LINE = re.compile(r"^(?P<hash>[0-9a-fA-F]{64}) [ *](?P<path>.+)$")


def load_manifest(path: Path | str) -> dict[str, str]:
    """``{relative path: sha256 hex}`` from a manifest file; one-line errors for bad input."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read manifest ({exc})") from exc
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            entries = _from_json(json.loads(text))
        except ValueError as exc:
            raise UsageError(f"{path}: not a valid JSON manifest ({exc})") from exc
    else:
        entries = {}
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.startswith("#"):
                continue
            match = _LINE.match(line.rstrip("\n"))
            if not match:
                raise UsageError(f"{path}:{number}: not a sha256sum line: {line[:80]!r}")
            entries[_norm(match["path"])] = match["hash"].lower()
    if not entries:
        raise UsageError(f"{path}: the manifest lists no files")
    return entries


def _from_json(data: Any) -> dict[str, str]:
    if isinstance(data, dict):
        for name in ("files", "entries", "objects"):
            if isinstance(data.get(name), list | dict):
                return _from_json(data[name])
        out = {}
        for k, v in data.items():
            if isinstance(v, str) and re.fullmatch(r"[0-9a-fA-F]{64}", v):
                out[_norm(k)] = v.lower()
            elif isinstance(v, dict) and isinstance(v.get("sha256"), str):
                out[_norm(k)] = v["sha256"].lower()
        return out
    if isinstance(data, list):
        out = {}
        for item in data:
            if not isinstance(item, dict):
                continue
            name = item.get("path") or item.get("key") or item.get("name")
            digest = item.get("sha256")
            if isinstance(name, str) and isinstance(digest, str):
                out[_norm(name)] = digest.lower()
        return out
    raise ValueError("expected an object or a list")


def _norm(name: str) -> str:
    name = name.strip().replace("\\", "/")
    while name.startswith("./"):
        name = name[2:]
    return name


def expected_sha256(manifest: dict[str, str], key: str, prefix: str = "") -> str | None:
    """The manifest's SHA-256 for an object key: exact key, key relative to the prefix, a path
    suffix match, or a unique basename match (in that order)."""
    if key in manifest:
        return manifest[key]
    if prefix and key.startswith(prefix):
        rel = key[len(prefix):].lstrip("/")
        if rel in manifest:
            return manifest[rel]
    suffix = [p for p in manifest if key.endswith("/" + p) or p.endswith("/" + key)]
    if len(suffix) == 1:
        return manifest[suffix[0]]
    base = key.rsplit("/", 1)[-1]
    same = [p for p in manifest if p.rsplit("/", 1)[-1] == base]
    if len(same) == 1:
        return manifest[same[0]]
    return None
