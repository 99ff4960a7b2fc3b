"""Parser for ``zfs get -Hp -o name,property,value,source ...`` (tab-separated). Pure."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Prop:
    value: str
    source: str


def parse(text: str) -> dict[str, dict[str, Prop]]:
    """{dataset: {property: Prop}}; lines that are not four tab-separated columns are skipped."""
    out: dict[str, dict[str, Prop]] = {}
    for line in text.splitlines():
        cols = line.split("\t")
        if len(cols) != 4:
            continue
        name, prop, val, source = cols
        out.setdefault(name, {})[prop] = Prop(val, source)
    return out
