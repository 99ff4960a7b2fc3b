"""CRC32C (Castagnoli) and TFRecord's masked form, under the dataset wing's name: one
implementation, :mod:`ckptrescue.checkpoints.formats.crc32c` (``google-crc32c``, a core
dependency), shared with the TensorFlow bundle readers.
"""

from __future__ import annotations

from ckptrescue.checkpoints.formats.crc32c import crc32c, mask, masked_crc32c

__all__ = ["crc32c", "mask", "masked_crc32c"]
