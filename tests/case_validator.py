"""The CASE project's validator (``case_validate`` from case-utils) for the tests, each SPARQL
query text parsed once.

pyshacl evaluates a SPARQL-based constraint once per focus node and gives rdflib the same query
text each time, with the node as a binding; rdflib parses and translates that text anew on every
call. On the drill's case that is 1,341 parses of 4 texts: its validation took 13 s, and takes
2.9 s this way. Run as a script, this module has rdflib's SPARQL processor keep each translated
query by its text, base and namespaces (a translated query is evaluated with any bindings:
rdflib's ``prepareQuery`` exists for that) and then runs case_validate's own ``main()``: its
arguments, ontology, shapes, validation, report and exit status.
``tests/exports/test_case_validator.py`` holds the report to the plain ``case_validate``'s on a
document that breaks SPARQL-based and core shapes. With ``CKPTRESCUE_TEST_SPARQL_COUNTS=1`` the
numbers of queries and of parses are printed last on stderr.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

PLAIN = Path(sys.executable).with_name("case_validate")  # the console script case-utils installs


def validate(path: Path, *options: str, version: str = "case-1.5.0", timeout: float = 600,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``case_validate --built-version VERSION OPTIONS... PATH``, in a child process."""
    return subprocess.run([sys.executable, __file__, "--built-version", version, *options,
                           str(path)], capture_output=True, text=True, timeout=timeout, env=env)


def _prepare_queries_once() -> dict[str, int]:
    import inspect

    from rdflib.plugins.sparql import processor
    from rdflib.plugins.sparql.algebra import translateQuery
    from rdflib.plugins.sparql.parser import parseQuery

    prepared: dict[tuple[str, Any, Any], Any] = {}
    counts = {"queries": 0, "parsed": 0}
    query = processor.SPARQLProcessor.query
    signature = inspect.signature(query)

    def query_prepared(*args: Any, **kwargs: Any) -> Any:
        call = signature.bind(*args, **kwargs)
        text, base = call.arguments["strOrQuery"], call.arguments.get("base")
        if isinstance(text, str):
            namespaces = call.arguments.get("initNs")
            key = (text, base, tuple(sorted((namespaces or {}).items())))
            counts["queries"] += 1
            if key not in prepared:
                counts["parsed"] += 1
                prepared[key] = translateQuery(parseQuery(text), base, namespaces)
            call.arguments["strOrQuery"] = prepared[key]
        return query(*call.args, **call.kwargs)

    processor.SPARQLProcessor.query = query_prepared  # type: ignore[method-assign]
    return counts


if __name__ == "__main__":
    import atexit
    import os

    counts = _prepare_queries_once()
    if os.environ.get("CKPTRESCUE_TEST_SPARQL_COUNTS") == "1":
        atexit.register(lambda: print(f"sparql queries {counts['queries']} parsed "
                                      f"{counts['parsed']}", file=sys.stderr))
    from case_utils.case_validate import main

    sys.argv[0] = str(PLAIN)
    sys.exit(main())
