"""Parser for ``dumpe2fs -h`` (e2fsprogs 1.47): superblock fields, features, error records. Pure.

``needs_recovery`` in the features means the journal holds unreplayed transactions; ``Filesystem
state`` other than ``clean`` and ``FS Error count`` / ``First error`` / ``Last error`` fields mean
the kernel recorded errors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ckptrescue.model import JsonObject


@dataclass
class Ext4Super:
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def features(self) -> set[str]:
        return set(self.fields.get("Filesystem features", "").split())

    @property
    def needs_recovery(self) -> bool:
        return "needs_recovery" in self.features

    @property
    def state(self) -> str:
        return self.fields.get("Filesystem state", "")

    @property
    def error_count(self) -> int:
        try:
            return int(self.fields.get("FS Error count", "0"))
        except ValueError:
            return 0

    @property
    def errors(self) -> dict[str, str]:
        return {k: v for k, v in self.fields.items()
                if k.startswith(("First error", "Last error"))}

    def to_json(self) -> JsonObject:
        return {"state": self.state, "features": sorted(self.features),
                "needs_recovery": self.needs_recovery, "error_count": self.error_count,
                "errors": self.errors, "journal_start": self.fields.get("Journal start"),
                "block_size": self.fields.get("Block size"), "uuid":
                self.fields.get("Filesystem UUID")}


def parse(text: str) -> Ext4Super:
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key and not key.startswith(" "):
            out.setdefault(key.strip(), value.strip())
    return Ext4Super(out)
