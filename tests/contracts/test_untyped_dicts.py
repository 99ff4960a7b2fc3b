"""Typed data: ``dict[str, Any]`` is written at most 350 times in the package (#27). Data with
a shape says so: a typed record (``model.JsonRecord``: step outputs and what they hold), a
``TypedDict`` (``model.AuditRecord``) or an alias naming the shape (``model.JsonObject`` for a
JSON object, ``engine.action.ActionArgs`` for an action's arguments)."""

from __future__ import annotations

from import_graph import PACKAGE, modules

LIMIT = 350


def test_dict_str_any_is_rare() -> None:
    counts = {m: p.read_text(encoding="utf-8").count("dict[str, Any]")
              for m, p in modules().items() if m.startswith(PACKAGE)}
    total = sum(counts.values())
    worst = sorted(counts.items(), key=lambda kv: -kv[1])[:8]
    assert total <= LIMIT, (f"dict[str, Any] written {total} times (limit {LIMIT}); the most: "
                            + ", ".join(f"{m} {n}" for m, n in worst))
