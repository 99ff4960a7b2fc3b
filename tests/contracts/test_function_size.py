"""Named phases: no function of the package runs over 120 lines (def line to last line). A
longer one is split into phases, each a short function that can be read and tested alone."""

from __future__ import annotations

import ast

from import_graph import modules, tree

MAX_LINES = 120


def long_functions(limit: int = MAX_LINES) -> list[str]:
    out = []
    for module in modules():
        for node in ast.walk(tree(module)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    out.append(f"{module}.{node.name}: {lines} lines")
    return sorted(out)


def test_the_check_counts_lines() -> None:
    assert long_functions(limit=10), "the package has functions over 10 lines"


def test_no_function_over_120_lines() -> None:
    bad = long_functions()
    assert not bad, "split these into named phases:\n  " + "\n  ".join(bad)
