"""Pure checkpoint-format parsers. Each module may define ``FORMATS`` (see ckptrescue.checkpoints.base)."""
