"""No module of the package imports a private name (``_name``) from another module, spelled as
``from m import _name`` or reached as ``m._name`` through an imported module, nor a private
module (``_util.py``) from outside its package. Helpers two modules share go in a small module
both import (``datasets/manifest_files.py``, ``probes/single.py``); the allow-list below is
empty and stays so."""

from __future__ import annotations

import ast
import warnings
from collections.abc import Iterable, Iterator

from import_graph import (
    PACKAGE,
    Import,
    imports_of,
    is_private,
    modules,
    resolve_from,
    scan_source,
    tree,
    within,
)

# (importer, imported module, private name): none remain; a new one is a helper to make public
ALLOWED: frozenset[tuple[str, str, str]] = frozenset()


def _private_module(module: str) -> str | None:
    """The private package component of ``module`` (``a.b._c.d`` -> ``a.b._c``), if any."""
    parts = module.split(".")
    for n, part in enumerate(parts):
        if is_private(part):
            return ".".join(parts[: n + 1])
    return None


def _from_imports(imports: Iterable[Import]) -> Iterator[tuple[Import, str, str]]:
    """(statement, imported module, private name) for every private import in ``imports``."""
    for imp in imports:
        if not within(imp.module, PACKAGE) or imp.module == imp.importer:
            continue
        if imp.name is not None and is_private(imp.name) and imp.target == imp.module:
            yield imp, imp.module, imp.name
            continue
        private = _private_module(imp.target)
        if private is not None:
            owner = private.rpartition(".")[0]
            if not within(imp.importer, owner):
                yield imp, imp.target, imp.name or private.rpartition(".")[2]


def _attribute_uses(module: str, node: ast.AST) -> Iterator[tuple[int, str, str]]:
    """(line, module, private name) for ``alias._name`` where ``alias`` names a package module
    imported in ``module`` (``from ckptrescue.datasets import manifest``; ``manifest._record``)."""
    bound: dict[str, str] = {}
    for stmt in ast.walk(node):
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(stmt, ast.ImportFrom):
            source = resolve_from(module, stmt)
            for alias in stmt.names:
                if f"{source}.{alias.name}" in modules():
                    bound[alias.asname or alias.name] = f"{source}.{alias.name}"
    for expr in ast.walk(node):
        if not (isinstance(expr, ast.Attribute) and is_private(expr.attr)):
            continue
        chain, base = [], expr.value
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        if not isinstance(base, ast.Name) or base.id not in bound:
            continue
        target = ".".join([bound[base.id], *reversed(chain)])
        if target in modules() and target != module:
            yield expr.lineno, target, expr.attr


def private_uses(module: str, node: ast.AST, imports: Iterable[Import]
                 ) -> list[tuple[str, str, str, int]]:
    """(importer, module, private name, line) for every private name ``module`` takes."""
    out = [(module, source, name, imp.line) for imp, source, name in _from_imports(imports)]
    out += [(module, source, name, line) for line, source, name in _attribute_uses(module, node)]
    return out


def _all_uses() -> list[tuple[str, str, str, int]]:
    return [use for m in modules() for use in private_uses(m, tree(m), imports_of(m))]


def test_the_check_sees_every_spelling() -> None:
    source = (
        "from ckptrescue.datasets.manifest import _record, build_manifest\n"
        "from .numeric import _from_bits\n"
        "from ckptrescue.actions._util import from_library\n"
        "from ckptrescue.datasets import manifest as m\n"
        "import ckptrescue.checkpoints.probes.checkpoints\n"
        "def f():\n"
        "    m._ends_torn(None)\n"
        "    ckptrescue.checkpoints.probes.checkpoints._claims(None)\n"
        "    m.__name__\n"
    )
    module = "ckptrescue.checkpoints.formats.zipwalk"
    uses = private_uses(module, ast.parse(source), list(scan_source(module, source)))
    assert sorted((s.rpartition(".")[2], n) for _i, s, n, _l in uses) == [
        ("_util", "from_library"), ("checkpoints", "_claims"), ("manifest", "_ends_torn"),
        ("manifest", "_record"), ("numeric", "_from_bits")]


def test_no_private_names_across_modules() -> None:
    bad = [f"{modules()[i].relative_to(modules()[PACKAGE].parents[1])}:{line}: {i} takes "
           f"{source}.{name}"
           for i, source, name, line in _all_uses() if (i, source, name) not in ALLOWED]
    assert not bad, ("private names imported from another module (make them public, or move "
                     "the shared helper into a module both import):\n  " + "\n  ".join(bad))


def test_the_allow_list_only_shrinks() -> None:
    """An allowed private import that is gone should leave the list; said, not failed, so that
    the owners of those modules can drop it when they commit the change that removes it."""
    used = {(i, s, n) for i, s, n, _line in _all_uses()}
    stale = sorted(ALLOWED - used)
    if stale:
        warnings.warn(f"no longer needed in ALLOWED: {stale}", stacklevel=1)
    assert not ALLOWED, "the allow-list stays empty"
