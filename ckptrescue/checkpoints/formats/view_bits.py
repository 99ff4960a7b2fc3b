"""torch's neg and conj view bits: the values a loaded tensor holds from the bytes it stores.

``torch.save`` of a conjugate view (``x.conj()`` of a complex tensor) or a negative view stores
the tensor's bytes as they are and sets ``metadata = {"conj": True}`` / ``{"neg": True}`` in the
rebuild call; ``torch.load`` sets the bits again (``torch._C._set_tensor_metadata``: a key that
is present sets its bit, whatever its value), so what the loaded tensor holds is the stored
values conjugated / negated. The static map marks such a tensor with :data:`NEG` / :data:`CONJ`
among its reasons, and salvage writes the values torch gives, not the stored bytes
(:class:`Resolving`), so that ``probe --load`` compares like with like.

Negation is the sign bit flipped for IEEE floats (what torch's ``neg`` kernel does, NaN and
zero included), two's complement for integers; conjugation flips the sign of the imaginary half.
torch has no ``neg`` for ``bool`` or the float8 kinds: such a tensor cannot be resolved by
torch either (:func:`unresolvable`).
"""

from __future__ import annotations

from typing import Any, BinaryIO

from ckptrescue.checkpoints.formats import dtypes

NEG = "loaded negated (torch's neg bit): the stored values are written negated"
CONJ = "loaded conjugated (torch's conj bit): the stored values are written conjugated"
MARKERS = {"neg": NEG, "conj": CONJ}
_FLOATS = {"float64", "float32", "float16", "bfloat16", "complex128", "complex64", "complex32"}


def markers(bits: tuple[str, ...]) -> list[str]:
    """The reasons that mark a tensor rebuilt with these bits."""
    return [MARKERS[b] for b in ("neg", "conj") if b in bits]


def bits_of(reasons: list[str]) -> tuple[str, ...]:
    return tuple(b for b, m in MARKERS.items() if m in reasons)


def unresolvable(dtype: str | None, bits: tuple[str, ...]) -> str | None:
    """Why the loaded values cannot be had (torch's ``resolve_neg`` fails too), else None."""
    info = dtypes.lookup(dtype)
    if not bits or info is None:
        return None if not bits else f"torch's {'/'.join(bits)} bit on an unknown dtype"
    if "neg" in bits and info.name not in _FLOATS and info.kind != "int":
        return f"torch's neg bit on a {info.name} tensor (torch has no neg for it)"
    return None


def _flip_masks(info: dtypes.DType, bits: tuple[str, ...]) -> list[int]:
    """Byte positions (within an element) whose top bit flips: each float half's sign."""
    half = info.itemsize // 2 if info.kind == "complex" else info.itemsize
    real_sign, imag_sign = half - 1, info.itemsize - 1
    out = set()
    if "neg" in bits:
        out.update({real_sign, imag_sign} if info.kind == "complex" else {real_sign})
    if "conj" in bits and info.kind == "complex":
        out ^= {imag_sign}
    return sorted(out)


def resolve(data: bytes, info: dtypes.DType, bits: tuple[str, ...]) -> bytes:
    """Little-endian bytes of whole elements, as the loaded (resolved) tensor holds them."""
    if info.name in _FLOATS:
        flips = _flip_masks(info, bits)
        if not flips:
            return data
        buf = bytearray(data)
        for pos in flips:
            view = buf[pos::info.itemsize]
            buf[pos::info.itemsize] = bytes(b ^ 0x80 for b in view)
        return bytes(buf)
    if "neg" in bits and info.kind == "int":
        import numpy as np

        assert info.numpy is not None
        arr = np.frombuffer(data, dtype="<" + info.numpy.lstrip("<"))
        with np.errstate(over="ignore"):
            return np.negative(arr).astype(arr.dtype).tobytes()
    return data


class Resolving:
    """A write-only sink that resolves the bits on whole elements before passing them on."""

    def __init__(self, out: BinaryIO, info: dtypes.DType, bits: tuple[str, ...]) -> None:
        self.out, self.info, self.bits = out, info, bits
        self.rest = b""

    def write(self, data: Any) -> int:
        n = len(data)
        data = self.rest + bytes(data)
        whole = len(data) - len(data) % self.info.itemsize
        self.rest = data[whole:]
        if whole:
            self.out.write(resolve(data[:whole], self.info, self.bits))
        return n
