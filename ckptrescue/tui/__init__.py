"""The guided TUI (Textual): a thin view over the engine, the playbooks and the case.

``ckptrescue tui`` calls :func:`ckptrescue.tui.app.make_app`. Nothing here runs a tool or
computes a finding: screens start :func:`ckptrescue.engine.executor.run` in a thread worker and render the
events it yields and the case data it records. Importing this package imports nothing heavy;
Textual is imported by the modules below it.
"""
