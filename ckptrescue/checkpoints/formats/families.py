"""Registers the multi-rank checkpoint families (``ckptrescue/checkpoints/families/``) as checkpoint formats,
so discovery, probe, rank and salvage pick them up with no further wiring. Families have
priority 5: a DeepSpeed or Megatron step directory is claimed before DCP/HF (10) look at it.
"""

from __future__ import annotations

from ckptrescue.checkpoints.families import families

FORMATS = list(families())
