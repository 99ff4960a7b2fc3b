"""Playbooks: YAML plans of built-in actions (schema, loader, linter, parameter binding)."""
