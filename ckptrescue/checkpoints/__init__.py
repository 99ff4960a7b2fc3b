"""The checkpoint wing: what a checkpoint is and how it is verified, salvaged and ranked.

Layered from pure to effects: ``base`` (verdicts, tensor records, the format registry),
``formats/`` and ``families/`` (pure readers: bytes in, findings out), then the library that
uses them over files and cases (``probes/``, ``salvage``, ``rank``) and ``verified_load`` (the
one module a training job imports).
"""
