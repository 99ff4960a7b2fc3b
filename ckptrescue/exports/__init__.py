"""Standard exports of a case (issue 19): CASE/UCO JSON-LD (:mod:`.case_uco`) and a
Timesketch-compatible timeline (:mod:`.timeline`). Both read the case's hash-chained audit log
and artifacts only; nothing is re-run and nothing in the case is written."""
