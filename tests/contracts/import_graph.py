"""Every import statement of the ``ckptrescue`` package, read from the source (AST), not from
``sys.modules``: module level and inside functions and methods, ``import x``,
``from x import y``, relative imports resolved, and whether it sits under ``if TYPE_CHECKING:``.
Dynamic imports (``importlib.import_module``) are not statements; the runtime checks in
``test_import_hygiene.py`` cover the plugin discovery that uses them.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "ckptrescue"
ROOT = REPO / PACKAGE


@dataclass(frozen=True)
class Import:
    importer: str      # dotted module holding the statement
    module: str        # absolute module imported from (``from M import n`` / ``import M``)
    name: str | None   # the imported name for ``from M import name`` (None for ``import M``)
    line: int
    in_function: bool  # inside a def/lambda: runs when called, not when the module loads
    type_checking: bool  # under ``if TYPE_CHECKING:``: never runs

    @property
    def target(self) -> str:
        """The module this statement loads: ``M.name`` when that is a submodule, else ``M``."""
        if self.name is not None and f"{self.module}.{self.name}" in modules():
            return f"{self.module}.{self.name}"
        return self.module

    @property
    def where(self) -> str:
        return f"{modules()[self.importer].relative_to(REPO)}:{self.line}"


@functools.cache
def modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the package."""
    out: dict[str, Path] = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


@functools.cache
def tree(module: str) -> ast.Module:
    return ast.parse(modules()[module].read_text(encoding="utf-8"), str(modules()[module]))


def _package_of(module: str) -> str:
    return module if modules()[module].name == "__init__.py" else module.rpartition(".")[0]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def resolve_from(module: str, node: ast.ImportFrom) -> str:
    """The absolute module of ``from [.]*X import ...`` written in ``module``."""
    if not node.level:
        return node.module or ""
    base = _package_of(module).split(".")
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _walk(module: str, node: ast.AST, in_function: bool, type_checking: bool
          ) -> Iterator[Import]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import):
            for alias in child.names:
                yield Import(module, alias.name, None, child.lineno, in_function, type_checking)
        elif isinstance(child, ast.ImportFrom):
            source = resolve_from(module, child)
            for alias in child.names:
                yield Import(module, source, alias.name, child.lineno, in_function,
                             type_checking)
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.body:
                yield from _walk(module, ast.Module(body=[stmt], type_ignores=[]), in_function,
                                 True)
            for stmt in child.orelse:
                yield from _walk(module, ast.Module(body=[stmt], type_ignores=[]), in_function,
                                 type_checking)
        else:
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                      ast.Lambda))
            yield from _walk(module, child, inner, type_checking)


@functools.cache
def imports_of(module: str) -> tuple[Import, ...]:
    return tuple(_walk(module, tree(module), False, False))


def scan_source(module: str, source: str) -> Iterator[Import]:
    """The imports of ``source`` as if it were ``module`` (for testing the scan itself)."""
    return _walk(module, ast.parse(source), False, False)


def all_imports() -> Iterator[Import]:
    for module in modules():
        yield from imports_of(module)


def within(module: str, prefix: str) -> bool:
    """``module`` is ``prefix`` or inside it (``ckptrescue.checkpoints.formats.zipwalk`` in
    ``ckptrescue.checkpoints.formats``)."""
    return module == prefix or module.startswith(prefix + ".")


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))
