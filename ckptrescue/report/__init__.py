"""The incident report: a model computed from the case alone, rendered by Jinja2 templates."""
