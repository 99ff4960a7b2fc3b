"""Sampled audits: which entries to draw, and what the sample says about the whole.

``--sample`` is a percentage (``1%``), a fraction below 1 (``0.01``) or a file count
(``2000``). The draw is ``random.Random(seed).sample`` over the entries sorted by name, so the
same manifest, directory and seed always draw the same files. The result is stated as an exact
one-sided Clopper-Pearson upper bound at 95%: the largest corruption rate ``p`` under which
seeing at most ``bad`` bad files in ``n`` draws still has probability 5%
(``P(X <= bad | n, p) = 0.05``), found by bisection on the binomial CDF (standard library only).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from ckptrescue.errors import UsageError
from ckptrescue.model import JsonObject

T = TypeVar("T")
CONFIDENCE = 0.95


def parse_sample(text: str | float | int) -> tuple[float, bool]:
    """``("1%")`` -> ``(0.01, True)`` (a fraction); ``"2000"`` -> ``(2000, False)`` (a count)."""
    raw = str(text).strip()
    try:
        if raw.endswith("%"):
            value = float(raw[:-1]) / 100
            fraction = True
        else:
            value = float(raw)
            fraction = value < 1
    except ValueError:
        raise UsageError(f"--sample {text}: give a percentage (1%), a fraction (0.01) or a "
                         "file count (2000)") from None
    if not math.isfinite(value) or value <= 0 or (fraction and value > 1) or (
            not fraction and value != int(value)):
        raise UsageError(f"--sample {text}: a percentage in (0, 100], a fraction in (0, 1) or "
                         "a whole number of files")
    return value, fraction


def sample_size(population: int, sample: str | float | int) -> int:
    value, fraction = parse_sample(sample)
    if population == 0:
        return 0
    if fraction:
        return min(population, max(1, math.ceil(population * value)))
    return min(population, int(value))


def draw(items: Sequence[T], k: int, seed: int) -> list[T]:
    """``k`` of ``items`` (already in a fixed order), the same ones for the same seed."""
    rng = random.Random(seed)  # noqa: S311 - reproducible from the recorded seed, by design
    return rng.sample(list(items), k)


def binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in log space."""
    if k >= n or p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    lp, lq = math.log(p), math.log1p(-p)
    lgn = math.lgamma(n + 1)
    terms = [math.exp(lgn - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq)
             for i in range(k + 1)]
    return min(1.0, math.fsum(terms))


def clopper_pearson_upper(bad: int, n: int, confidence: float = CONFIDENCE) -> float:
    """The exact one-sided upper confidence bound of a binomial proportion."""
    if n <= 0:
        return 1.0
    if bad >= n:
        return 1.0
    alpha = 1.0 - confidence
    if bad == 0:  # closed form: (1 - p)^n = alpha
        return -math.expm1(math.log(alpha) / n)
    lo, hi = bad / n, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if binom_cdf(bad, n, mid) > alpha:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * max(hi, 1e-300):
            break
    return hi


def percent_up(fraction: float) -> str:
    """A fraction as a percentage rounded *up* to 3 significant digits (a bound never shrinks)."""
    pct = fraction * 100
    if pct <= 0:
        return "0"
    if pct >= 100:
        return "100"
    scale = 10 ** (2 - math.floor(math.log10(pct)))
    return f"{math.ceil(pct * scale - 1e-9) / scale:.6g}"


@dataclass(frozen=True)
class SampleStats:
    """What a sampled audit drew and found."""

    seed: int
    size: int
    population: int
    bad: int
    unreadable: int = 0

    @property
    def upper_bound_95(self) -> float:
        return clopper_pearson_upper(self.bad, self.size)

    def statement(self) -> str:
        what = "corrupted or unreadable" if self.unreadable else "corrupted"
        if self.size == 0:
            return "no file was sampled (nothing present with its recorded size)"
        return (f"{self.bad:,} of {self.size:,} sampled files {what}: with 95% confidence "
                f"fewer than {percent_up(self.upper_bound_95)}% of the {self.population:,} "
                f"files are {what}")

    def to_json(self) -> JsonObject:
        return {"seed": self.seed, "size": self.size, "population": self.population,
                "bad": self.bad, "upper_bound_95": self.upper_bound_95,
                "statement": self.statement()}
