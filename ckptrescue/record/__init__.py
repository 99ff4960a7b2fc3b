"""The case record: the case folder (``case``), its hash-chained audit log (``audit``) and the
provenance of what the kit itself is (``provenance``). The log is the only truth."""
