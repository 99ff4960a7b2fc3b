"""The CASE project's validator (``case_validate`` from case-utils) for the tests, each SPARQL
query text parsed once.

pyshacl evaluates a SPARQL-based constraint once per focus node and gives rdflib the same query
text each time, with the node as a binding; rdflib parses and translates that text anew on every
call. On the drill's case that is 1,341 parses of 4 texts, about 10 of case_validate's 13 CPU-s.
Run as a script, this module has rdflib's SPARQL processor keep each translated query by its
text, base and namespaces (a translated query is evaluated with any bindings: rdflib's
``prepareQuery`` exists for that) and then runs case_validate's own ``main()``: its arguments,
ontology, shapes, validation, report and exit status. ``tests/exports/test_case_validator.py``
holds the report to the plain ``case_validate``'s on a document that breaks SPARQL-based and core
constraints.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

PLAIN = Path(sys.executable).with_name("case_validate")  # the console script case-utils installs


def validate(path: Path, *options: str, version: str = "case-1.5.0",
             timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``case_validate --built-version VERSION OPTIONS... PATH``, in a child process."""
    return subprocess.run([sys.executable, __file__, "--built-version", version, *options,
                           str(path)], capture_output=True, text=True, timeout=timeout)


def _prepare_queries_once() -> None:
    from rdflib.plugins.sparql import processor
    from rdflib.plugins.sparql.algebra import translateQuery
    from rdflib.plugins.sparql.parser import parseQuery

    prepared: dict[tuple[str, str | None, tuple[tuple[str, Any], ...]], Any] = {}
    query = processor.SPARQLProcessor.query

    def query_prepared(self: Any, str_or_query: Any, initBindings: Any = None,  # noqa: N803
                       initNs: Any = None, base: str | None = None,  # noqa: N803
                       DEBUG: bool = False) -> Any:  # noqa: N803
        if isinstance(str_or_query, str):
            key = (str_or_query, base, tuple(sorted((initNs or {}).items())))
            if key not in prepared:
                prepared[key] = translateQuery(parseQuery(str_or_query), base, initNs)
            str_or_query = prepared[key]
        return query(self, str_or_query, initBindings, initNs, base, DEBUG)

    processor.SPARQLProcessor.query = query_prepared  # type: ignore[method-assign]


if __name__ == "__main__":
    _prepare_queries_once()
    from case_utils.case_validate import main

    sys.argv[0] = str(PLAIN)
    sys.exit(main())
