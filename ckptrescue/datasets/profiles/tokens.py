"""Token counts for text fields: a callable, or a Hugging Face tokenizer named by the caller.

The tokenizer is optional and imported lazily. A name is loaded with ``transformers``'
``AutoTokenizer.from_pretrained(name, local_files_only=True)``, or a ``tokenizer.json`` path with
``tokenizers.Tokenizer.from_file``: the kit never downloads a tokenizer (put it in the local
cache first). A callable may return the tokens (anything with a length) or their count.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sized
from pathlib import Path
from typing import Any

from ckptrescue.errors import UsageError, optional_module

Tokenizer = Callable[[str], Sized | int] | str
TokenCounter = Callable[[str], int]


def _count(fn: Callable[[str], Any], text: str) -> int:
    out = fn(text)
    return out if isinstance(out, int) else len(out)


def whitespace_tokens(text: str) -> int:
    """The number of whitespace-separated words (a tokenizer for tests and rough counts)."""
    return len(text.split())


@functools.lru_cache(maxsize=4)
def _named(name: str) -> TokenCounter:
    if name == "whitespace":
        return whitespace_tokens
    if Path(name).is_file():
        with optional_module(f"tokenizer file {name}: the tokenizers module is not installed",
                             hint="pip install tokenizers"):
            from tokenizers import Tokenizer as HFTokenizer  # type: ignore[import-not-found]
        tok = HFTokenizer.from_file(name)
        return lambda text: len(tok.encode(text, add_special_tokens=False).ids)
    with optional_module(f"tokenizer {name!r}: transformers is not installed",
                         hint="pip install transformers (the tokenizer must be in the local "
                              "Hugging Face cache; nothing is downloaded)"):
        from transformers import AutoTokenizer  # type: ignore[import-not-found]
    try:
        hf = AutoTokenizer.from_pretrained(name, local_files_only=True)
    except OSError as exc:
        raise UsageError(f"tokenizer {name!r} is not in the local Hugging Face cache "
                         "(the kit never downloads one)") from exc
    return lambda text: len(hf(text, add_special_tokens=False)["input_ids"])


def resolve(tokenizer: Tokenizer | None) -> TokenCounter | None:
    """A ``text -> token count`` function for ``tokenizer`` (None: no token counts)."""
    if tokenizer is None:
        return None
    if isinstance(tokenizer, str):
        return _named(tokenizer)
    return functools.partial(_count, tokenizer)


def describe(tokenizer: Tokenizer | None) -> str | None:
    """How the profile names the tokenizer (a name, or the callable's qualified name)."""
    if tokenizer is None or isinstance(tokenizer, str):
        return tokenizer
    mod = getattr(tokenizer, "__module__", "") or ""
    name = getattr(tokenizer, "__qualname__", None) or type(tokenizer).__name__
    return f"callable:{mod}.{name}" if mod else f"callable:{name}"
