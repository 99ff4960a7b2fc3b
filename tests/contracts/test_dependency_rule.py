"""The dependency rule of ARCHITECTURE.md, checked statically on every import statement of the
package (module level and inside functions, relative imports resolved, ``TYPE_CHECKING`` imports
included except where only what runs matters). The tables below are the rule; ARCHITECTURE.md
states the same (``test_architecture_states_these_layers`` keeps the two in step)."""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Iterable

import pytest
from import_graph import (
    PACKAGE,
    REPO,
    Import,
    all_imports,
    imports_of,
    modules,
    scan_source,
    tree,
    within,
)

# ---- the rule --------------------------------------------------------------------------------

# Lowest first. A module imports package modules of its own layer or of a layer before it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("model", "errors", "checkpoints.base", "codes", "resources", "display",
              "plugins")),
    ("pure", ("checkpoints.formats", "checkpoints.families", "storage.parsers", "guard")),
    ("effects", ("effects", "record")),
    ("capabilities", ("checkpoints", "stores", "storage", "datasets", "sandbox_children")),
    ("engine", ("engine", "actions", "checkpoints.actions", "stores.actions", "datasets.actions",
                "storage.actions", "playbook", "report", "exports", "record.provenance")),
    ("adapters", ("cli", "tui", "drill", "__main__")),
)

# (importer, imported, why): the only imports of a later layer, each inside a function.
UPWARD_ALLOWED: tuple[tuple[str, str, str], ...] = (
    ("ckptrescue.checkpoints.base", "ckptrescue.checkpoints.formats",
     "checkpoint.formats() is the format registry: it discovers the plugins when called"),
)

PURE = LAYERS[0][1] + LAYERS[1][1]

# (who, what they never import, why)
FORBIDDEN: tuple[tuple[tuple[str, ...], tuple[str, ...], str], ...] = (
    (PURE, ("ckptrescue.effects", "subprocess", "textual", "typer", "jinja2", "torch",
            "tensorflow", "boto3"), "the core is pure: bytes/text in, findings out"),
    (LAYERS[4][1], ("ckptrescue.cli", "ckptrescue.tui", "textual", "typer"),
     "the engine knows no front end"),
)

# library -> the only places that import it ("" = nowhere)
ONLY_IN: dict[str, tuple[str, ...]] = {
    "subprocess": ("effects.runner",),          # the runner rule
    "typer": ("cli",), "click": ("cli",),
    "textual": ("tui",), "rich": ("tui",),
    "jinja2": ("report",),
    # real ML loaders run only in the sandbox child; the drill builds its own checkpoints
    # ... and the two helpers a TRAINING JOB imports: load after verifying, skip quarantined
    "torch": ("sandbox_children", "drill", "checkpoints.verified_load",
              "datasets.quarantine.torch_data"),
    "tensorflow": ("sandbox_children", "drill"),
    "keras": ("sandbox_children", "drill"),
    "safetensors": ("sandbox_children", "drill", "checkpoints.verified_load"),
    "boto3": ("stores.s3", "drill"), "botocore": ("stores.s3", "drill"), "moto": ("stores.s3",),
    # the object-store SDKs and the FUSE view behind their one read-only choke point each
    "azure": ("stores",), "google": ("stores",), "fuse": ("stores",),
    # evidence is never unpickled in-process (formats.pickle_scan reads pickles statically)
    "pickle": (), "_pickle": (), "cPickle": (), "dill": (), "cloudpickle": (), "joblib": (),
}

# never imported when the module loads by anything ``ckptrescue --help`` loads
HEAVY = ("torch", "tensorflow", "boto3", "botocore", "moto", "textual", "pyarrow", "dask",
         "distributed", "h5py", "numpy", "safetensors", "jinja2")
CLI_ENTRY = "ckptrescue.cli.main"


# ---- helpers ---------------------------------------------------------------------------------

def _top(module: str) -> str:
    """The LAYERS member that holds ``module``: the longest one it is within
    (``ckptrescue.checkpoints.formats.zipwalk`` -> ``checkpoints.formats``); the package itself
    -> ``""``; a module under no member -> its first component."""
    if not module.count("."):
        return ""
    rel = module.split(".", 1)[1]
    members = [m for _name, ms in LAYERS for m in ms if within(rel, m)]
    return max(members, key=len) if members else rel.split(".")[0]


def _layer(module: str) -> int:
    top = _top(module)
    if top == "":
        return 0  # ckptrescue/__init__.py: __version__ and the collection policy (stdlib only)
    for index, (_name, members) in enumerate(LAYERS):
        if top in members:
            return index
    raise AssertionError(f"{module} is in no layer of LAYERS (and ARCHITECTURE.md)")


def _ours(imp: Import) -> bool:
    return within(imp.module, PACKAGE)


def _library(imp: Import) -> str:
    return imp.module.split(".")[0]


def _matches(imp: Import, forbidden: str) -> bool:
    return within(imp.target, forbidden) or within(imp.module, forbidden)


def _fmt(bad: list[str]) -> str:
    return "\n  " + "\n  ".join(sorted(bad))


def layer_violations(imports: Iterable[Import]) -> list[str]:
    allowed = {(a, b) for a, b, _why in UPWARD_ALLOWED}
    bad = []
    for imp in imports:
        if not _ours(imp) or _layer(imp.target) <= _layer(imp.importer):
            continue
        if (imp.importer, imp.target) in allowed and imp.in_function:
            continue
        bad.append(f"{imp.where}: {imp.importer} ({LAYERS[_layer(imp.importer)][0]}) imports "
                   f"{imp.target} ({LAYERS[_layer(imp.target)][0]})")
    return bad


def forbidden_violations(imports: Iterable[Import], who: tuple[str, ...],
                         forbidden: tuple[str, ...]) -> list[str]:
    return [f"{imp.where}: {imp.importer} imports {imp.target}"
            for imp in imports if _top(imp.importer) in who
            for f in forbidden if _matches(imp, f)]


def placement_violations(imports: Iterable[Import]) -> list[str]:
    bad = []
    for imp in imports:
        places = ONLY_IN.get(_library(imp))
        if places is None:
            continue
        rel = imp.importer.removeprefix(PACKAGE + ".")
        if not any(within(rel, p) for p in places):
            where = ", ".join(places) or "nowhere"
            bad.append(f"{imp.where}: {imp.importer} imports {imp.module} (only in: {where})")
    return bad


# ---- the checks ------------------------------------------------------------------------------

def test_the_checks_see_imports_inside_functions_and_relative_ones() -> None:
    """The scan and the rules on a made-up ``formats`` module: nothing hides in a function, a
    relative import or a TYPE_CHECKING block."""
    source = textwrap.dedent("""\
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from ckptrescue.cli import main
        def probe():
            import subprocess
            from ...effects import runner
            class Inner:
                def load(self):
                    import torch.serialization
        """)
    found = list(scan_source("ckptrescue.checkpoints.formats.zipwalk", source))
    assert [(i.target, i.in_function, i.type_checking) for i in found[1:]] == [
        ("ckptrescue.cli.main", False, True), ("subprocess", True, False),
        ("ckptrescue.effects.runner", True, False), ("torch.serialization", True, False)]
    assert len(layer_violations(found)) == 2  # cli (adapters) and effects from pure
    assert len(forbidden_violations(found, FORBIDDEN[0][0], FORBIDDEN[0][1])) == 3
    assert len(placement_violations(found)) == 2  # subprocess, torch


def test_the_import_scan_sees_the_package() -> None:
    found = {(i.importer, i.target, i.in_function) for i in all_imports()}
    assert ("ckptrescue.checkpoints.base", "ckptrescue.checkpoints.formats", True) in found
    assert any(i.in_function and i.importer == "ckptrescue.engine.executor" for i in all_imports())
    assert len(modules()) > 150


def test_every_package_has_a_layer() -> None:
    tops = {_top(m) for m in modules()} - {""}
    placed = {m for _name, members in LAYERS for m in members}
    assert tops <= placed, f"place these in LAYERS and ARCHITECTURE.md: {sorted(tops - placed)}"
    assert placed <= tops, f"LAYERS names what does not exist: {sorted(placed - tops)}"


def test_layers_import_only_downward() -> None:
    bad = layer_violations(all_imports())
    assert not bad, "imports against the layer order:" + _fmt(bad)


def test_upward_exceptions_are_still_needed() -> None:
    for importer, imported, _why in UPWARD_ALLOWED:
        assert any(i.target == imported for i in imports_of(importer)), (
            f"{importer} no longer imports {imported}: drop it from UPWARD_ALLOWED")


@pytest.mark.parametrize(("who", "forbidden", "why"), FORBIDDEN,
                         ids=["pure-core", "engine-no-ui"])
def test_forbidden_imports(who: tuple[str, ...], forbidden: tuple[str, ...], why: str) -> None:
    bad = forbidden_violations(all_imports(), who, forbidden)
    assert not bad, f"{why}:" + _fmt(bad)


def test_libraries_only_where_they_belong() -> None:
    bad = placement_violations(all_imports())
    assert not bad, "libraries outside their modules:" + _fmt(bad)


def _loaded_at_start(entry: str) -> set[str]:
    """Package modules that importing ``entry`` executes (module-level imports, transitively,
    parent packages included; TYPE_CHECKING and function-level imports do not run)."""
    seen: set[str] = set()
    todo = [entry]
    while todo:
        module = todo.pop()
        if module in seen or module not in modules():
            continue
        seen.add(module)
        parts = module.split(".")
        todo += [".".join(parts[:n]) for n in range(1, len(parts))]
        todo += [i.target for i in imports_of(module)
                 if _ours(i) and not i.in_function and not i.type_checking]
    return seen


def _cli_start_modules() -> list[str]:
    """cli.main and the command modules it imports (by name, ``_COMMAND_MODULES``) at start."""
    for node in tree(CLI_ENTRY).body:
        if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "_COMMAND_MODULES"):
            names = ast.literal_eval(node.value)
            return [CLI_ENTRY, *(f"{PACKAGE}.cli.{n}" for n in names)]
    raise AssertionError("cli/main.py has no _COMMAND_MODULES: update this test")


def test_cli_start_imports_nothing_heavy() -> None:
    loaded: set[str] = set()
    for entry in _cli_start_modules():
        loaded |= _loaded_at_start(entry)
    assert {"ckptrescue.cli.probe_cmd", "ckptrescue.errors"} <= loaded and len(loaded) > 15
    bad = [f"{imp.where}: {imp.importer} imports {imp.module} when it loads"
           for module in sorted(loaded) for imp in imports_of(module)
           if not imp.in_function and not imp.type_checking and _library(imp) in HEAVY]
    assert not bad, ("`ckptrescue --help` would import heavy libraries; import them inside the "
                     "functions that need them:" + _fmt(bad))


def test_architecture_states_these_layers() -> None:
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split("## The dependency rule", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    stated = []
    for line in block.strip().splitlines():
        names = re.split(r"\s{2,}", line.strip())[0]
        stated.append(tuple(n.strip().rstrip("/") for n in names.split(",")))
    assert stated == [members for _name, members in LAYERS], (
        "ARCHITECTURE.md's layer diagram and LAYERS differ")
    for _who, forbidden, _why in FORBIDDEN:
        for name in forbidden:
            assert f"`{name}`" in section, f"ARCHITECTURE.md does not state the rule on {name}"
    for library in ONLY_IN:
        assert f"`{library}`" in section, f"ARCHITECTURE.md does not say where {library} goes"
