"""Child side: a family's exact safe globals registered with ``torch.serialization`` by qualified
name, WITHOUT importing the training library (importing deepspeed/megatron/lightning runs their
package code: accelerator probes, op builders, registrations).

``torch.serialization.add_safe_globals`` takes ``(object, "qualified.name")`` pairs (torch >= 2.5:
``_weights_only_unpickler._get_user_allowed_globals``), so the weights-only unpickler resolves
that exact name to the object given. For each name on the family's list:

* stdlib, ``torch`` and ``numpy`` names are imported for real (they are not training libraries
  and the child imports torch and numpy anyway);
* a training library's class is located statically: ``importlib.util.find_spec`` of the top-level
  package (which does not execute it), the module's source file under its search path, parsed
  with ``ast``; the class definition gives an inert stand-in registered under the exact name:
  an ``enum.Enum`` with the same members and values for an Enum (looked up by value, as the
  real one: an unknown value fails as it would in the real loader), otherwise a class with the
  same builtin base (``dict``/``list``/``object``) whose state is restored into ``__dict__``
  (the lists only hold plain-state classes, checked against the real libraries by the
  safe-globals tests, so the real class would get exactly that state too).

A name that cannot be resolved (library not installed in the sandbox, module or class not found,
an enum whose values are not literals) is reported; the caller then skips the load with that
status and never widens it to ``weights_only=False``.
"""

from __future__ import annotations

import ast
import enum
import importlib
import importlib.util
import os
import sys
from typing import Any

_REAL_TOPS = {"torch", "numpy"}
_BASES = {"dict": dict, "list": list, "OrderedDict": dict, "defaultdict": dict}
_ENUM_BASES = {"Enum": (), "IntEnum": (int,), "StrEnum": (str,), "Flag": (), "IntFlag": (int,)}


def _real(qualname: str) -> Any:
    module, _, name = qualname.rpartition(".")
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _source_file(qualname: str) -> tuple[str, list[str]] | str:
    """(source path, class path inside the module) or a reason it cannot be found."""
    parts = qualname.split(".")
    spec = importlib.util.find_spec(parts[0])
    if spec is None:
        return f"library {parts[0]} is not installed in the sandbox"
    dirs = list(spec.submodule_search_locations or [])
    if not dirs:
        return f"{parts[0]} is a module, not a package"
    for k in range(len(parts) - 1, 0, -1):  # the longest module path first
        for d in dirs:
            inner = parts[1:k]
            for candidate in ((os.path.join(d, *inner) + ".py") if inner else None,
                              os.path.join(d, *inner, "__init__.py")):
                if candidate is not None and os.path.isfile(candidate):
                    return candidate, parts[k:]
    return f"module of {qualname} not found under {dirs[0]}"


def _base_names(node: ast.ClassDef) -> list[str]:
    out = []
    for b in node.bases:
        if isinstance(b, ast.Name):
            out.append(b.id)
        elif isinstance(b, ast.Attribute):
            out.append(b.attr)
        elif isinstance(b, ast.Subscript):  # Dict[str, Any]
            value = b.value
            out.append(value.id if isinstance(value, ast.Name) else getattr(value, "attr", ""))
    return out


def _enum_members(node: ast.ClassDef) -> list[tuple[str, Any]] | str:
    members: list[tuple[str, Any]] = []
    counter = 0
    for stmt in node.body:
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1 or not isinstance(
                stmt.targets[0], ast.Name) or stmt.targets[0].id.startswith("_"):
            continue
        value = stmt.value
        if isinstance(value, ast.Call) and getattr(value.func, "id", getattr(
                value.func, "attr", "")) == "auto":
            counter += 1
            members.append((stmt.targets[0].id, counter))
            continue
        try:
            literal = ast.literal_eval(value)
        except ValueError:
            return f"enum member {stmt.targets[0].id} is not a literal"
        if isinstance(literal, int):
            counter = literal
        members.append((stmt.targets[0].id, literal))
    return members or "enum without literal members"


def _stand_in(qualname: str) -> Any:
    found = _source_file(qualname)
    if isinstance(found, str):
        return found
    path, inner = found
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), filename=path)
    except (OSError, SyntaxError, ValueError) as exc:
        return f"{path}: unreadable ({exc})"
    body: list[ast.stmt] = tree.body
    node: ast.ClassDef | None = None
    for name in inner:
        node = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == name), None)
        if node is None:
            return f"class {'.'.join(inner)} not defined in {path}"
        body = node.body
    assert node is not None
    module = qualname[: -len(".".join(inner)) - 1]
    bases = _base_names(node)
    kind = next((b for b in bases if b in _ENUM_BASES), None)
    if kind is not None:
        members = _enum_members(node)
        if isinstance(members, str):
            return f"{qualname}: {members}"
        mixin = _ENUM_BASES[kind] or ((int,) if "int" in bases else (str,) if "str" in bases
                                      else ())
        base = enum.Enum if kind not in ("Flag", "IntFlag") else enum.Flag
        return base(node.name, members, module=module, qualname=".".join(inner),
                    type=mixin[0] if mixin else None)
    builtin = next((_BASES[b] for b in bases if b in _BASES), object)
    return type(node.name, (builtin,), {"__module__": module, "__qualname__": ".".join(inner),
                                        "__doc__": f"inert stand-in for {qualname}"})


def resolve(names: list[str]) -> tuple[list[tuple[Any, str]], dict[str, str]]:
    """``(object, qualified name)`` pairs for ``add_safe_globals``, and name -> why unresolved."""
    pairs: list[tuple[Any, str]] = []
    missing: dict[str, str] = {}
    for qualname in sorted(set(names)):
        top = qualname.split(".")[0]
        try:
            if top in _REAL_TOPS or top in sys.stdlib_module_names:
                pairs.append((_real(qualname), qualname))
                continue
            obj = _stand_in(qualname)
        except (ImportError, AttributeError) as exc:
            missing[qualname] = f"{type(exc).__name__}: {exc}"
            continue
        if isinstance(obj, str):
            missing[qualname] = obj
        else:
            pairs.append((obj, qualname))
    return pairs, missing
