"""The TUI's screens, one module each (start, scenario, params, plan, run, findings, report)."""
