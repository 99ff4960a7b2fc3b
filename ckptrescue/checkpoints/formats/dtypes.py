"""Element types shared by the checkpoint formats (pure table, no torch).

Canonical names are torch's (``float32``, ``bfloat16``, ...). Each entry gives the item size in
bytes, the safetensors code and the numpy type string used by the numeric scan (``None`` when
numpy has no equivalent; ``bfloat16`` is widened by hand). Sources: ``torch/storage.py``
``_dtype_to_storage_type_map`` and the safetensors README's dtype list.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    name: str
    itemsize: int
    safetensors: str | None
    numpy: str | None
    kind: str  # "float", "int", "bool", "complex", "other"


_TABLE = [
    DType("float64", 8, "F64", "f8", "float"),
    DType("float32", 4, "F32", "f4", "float"),
    DType("float16", 2, "F16", "f2", "float"),
    DType("bfloat16", 2, "BF16", None, "float"),
    DType("float8_e4m3fn", 1, "F8_E4M3", None, "other"),
    DType("float8_e5m2", 1, "F8_E5M2", None, "other"),
    DType("float8_e8m0fnu", 1, "F8_E8M0", None, "other"),
    DType("float8_e4m3fnuz", 1, "F8_E4M3FNUZ", None, "other"),
    DType("float8_e5m2fnuz", 1, "F8_E5M2FNUZ", None, "other"),
    DType("int64", 8, "I64", "i8", "int"),
    DType("int32", 4, "I32", "i4", "int"),
    DType("int16", 2, "I16", "i2", "int"),
    DType("int8", 1, "I8", "i1", "int"),
    DType("uint8", 1, "U8", "u1", "int"),
    DType("uint16", 2, "U16", "u2", "int"),
    DType("uint32", 4, "U32", "u4", "int"),
    DType("uint64", 8, "U64", "u8", "int"),
    DType("bool", 1, "BOOL", "?", "bool"),
    DType("complex64", 8, "C64", "c8", "complex"),
    DType("complex128", 16, None, "c16", "complex"),  # no safetensors code (0.8 refuses C128)
    DType("complex32", 4, None, None, "complex"),
    DType("qint8", 1, None, "i1", "int"),
    DType("quint8", 1, None, "u1", "int"),
    DType("qint32", 4, None, "i4", "int"),
    DType("quint4x2", 1, None, "u1", "int"),
    DType("quint2x4", 1, None, "u1", "int"),
]

BY_NAME: dict[str, DType] = {d.name: d for d in _TABLE}
BY_SAFETENSORS: dict[str, DType] = {d.safetensors: d for d in _TABLE if d.safetensors}
# safetensors sub-byte float types (bits per element) that have no torch equivalent here.
SAFETENSORS_SUBBYTE_BITS = {"F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}
# Sub-byte codes safetensors' header parser accepts but its loaders refuse ("Dtype not
# understood": no numpy or torch type; safetensors 0.8): a file holding one does not load.
SAFETENSORS_UNLOADABLE = frozenset({"F6_E2M3", "F6_E3M2"})

# torch legacy typed storage class -> canonical dtype (``torch.FloatStorage`` ...).
STORAGE_CLASS: dict[str, str] = {
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
    "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8",
    "BoolStorage": "bool", "ComplexDoubleStorage": "complex128",
    "ComplexFloatStorage": "complex64", "QInt8Storage": "qint8", "QUInt8Storage": "quint8",
    "QInt32Storage": "qint32", "QUInt4x2Storage": "quint4x2", "QUInt2x4Storage": "quint2x4",
}

# Aliases torch prints for the same dtype (``torch.float`` is ``torch.float32``).
ALIASES = {"float": "float32", "double": "float64", "half": "float16", "long": "int64",
           "int": "int32", "short": "int16", "cfloat": "complex64", "cdouble": "complex128"}


def lookup(name: str | None) -> DType | None:
    """The :class:`DType` for a canonical or aliased torch name, else None."""
    if name is None:
        return None
    name = name.removeprefix("torch.")
    return BY_NAME.get(ALIASES.get(name, name))
