"""The statistical tests the comparison states, in plain Python (no SciPy dependency).

Every function is pure. p-values come from the textbook forms: the normal tail (``erfc``), the
chi-square tail (the regularised upper incomplete gamma function, series and continued fraction
as in Numerical Recipes §6.2), Student's t tail (the regularised incomplete beta function, §6.4),
and the asymptotic Kolmogorov distribution with Stephens' small-sample correction (§14.3).
Histograms are :class:`~ckptrescue.datasets.profiles.sketches.LogHistogram` bins: both sides share the
bins, so the KS distance is exact on the binned data (a conservative test for the raw values).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ckptrescue.datasets.profiles.sketches import LogHistogram

_EPS = 1e-15
_ITMAX = 500


def normal_sf(z: float) -> float:
    """P(Z > z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def two_sided_normal_p(z: float) -> float:
    return min(1.0, 2.0 * normal_sf(abs(z)))


def _gamma_series(a: float, x: float) -> float:
    term = total = 1.0 / a
    ap = a
    for _ in range(_ITMAX):
        ap += 1.0
        term *= x / ap
        total += term
        if abs(term) < abs(total) * _EPS:
            break
    return total * math.exp(-x + a * math.log(x) - math.lgamma(a))


def _gamma_cf(a: float, x: float) -> float:
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, _ITMAX):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            break
    return math.exp(-x + a * math.log(x) - math.lgamma(a)) * h


def gamma_q(a: float, x: float) -> float:
    """The regularised upper incomplete gamma function Q(a, x)."""
    if x <= 0:
        return 1.0
    if x < a + 1.0:
        return max(0.0, 1.0 - _gamma_series(a, x))
    return min(1.0, _gamma_cf(a, x))


def chi2_sf(x: float, dof: int) -> float:
    """P(X > x) for a chi-square variable with ``dof`` degrees of freedom."""
    return gamma_q(dof / 2.0, x / 2.0) if dof > 0 else 1.0


def _beta_cf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (tiny if abs(d) < tiny else d)
    h = d
    for m in range(1, _ITMAX):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (tiny if abs(d) < tiny else d)
        c = 1.0 + aa / c
        c = tiny if abs(c) < tiny else c
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (tiny if abs(d) < tiny else d)
        c = 1.0 + aa / c
        c = tiny if abs(c) < tiny else c
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            break
    return h


def beta_i(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) \
        + b * math.log(1.0 - x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _beta_cf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _beta_cf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, dof: float) -> float:
    """Two-sided p-value of Student's t with ``dof`` degrees of freedom."""
    if dof <= 0 or math.isnan(t):
        return 1.0
    return min(1.0, beta_i(dof / 2.0, 0.5, dof / (dof + t * t)))


def kolmogorov_sf(lam: float) -> float:
    """P(K > lam) for the Kolmogorov distribution."""
    if lam < 0.2:
        return 1.0
    total = 0.0
    for j in range(1, 101):
        term = 2.0 * (-1) ** (j - 1) * math.exp(-2.0 * j * j * lam * lam)
        total += term
        if abs(term) < 1e-12:
            break
    return min(1.0, max(0.0, total))


def ks_p(d: float, n: int, m: int) -> float:
    """Two-sample KS p-value (asymptotic, Stephens' correction) for distance ``d``."""
    if n == 0 or m == 0:
        return 1.0
    ne = n * m / (n + m)
    sq = math.sqrt(ne)
    return kolmogorov_sf((sq + 0.12 + 0.11 / sq) * d)


def ks_distance(a: LogHistogram, b: LogHistogram) -> float:
    """max |F_a - F_b| over the shared bins."""
    na, nb = a.total, b.total
    if not na or not nb:
        return 0.0
    fa = fb = 0
    d = 0.0
    for k in sorted(a.bins.keys() | b.bins.keys()):
        fa += a.bins.get(k, 0)
        fb += b.bins.get(k, 0)
        d = max(d, abs(fa / na - fb / nb))
    return d


PSI_BUCKETS = 10


def psi(reference: LogHistogram, current: LogHistogram, buckets: int = PSI_BUCKETS) -> float:
    """Population stability index over (up to) ``buckets`` quantile buckets of the reference.

    Bucket edges fall on bin edges where the reference's cumulative share passes i/buckets;
    empty buckets get half a count (add-half smoothing) so the log stays finite.
    """
    nr, nc = reference.total, current.total
    if not nr or not nc:
        return 0.0
    edges: list[int] = []
    cum = 0
    step = 1
    for k in sorted(reference.bins):
        cum += reference.bins[k]
        while step < buckets and cum >= step * nr / buckets:
            if not edges or edges[-1] != k:
                edges.append(k)
            step += 1
    ref_counts = [0] * (len(edges) + 1)
    cur_counts = [0] * (len(edges) + 1)
    for hist, out in ((reference, ref_counts), (current, cur_counts)):
        for k, c in hist.bins.items():
            out[_bucket(edges, k)] += c
    nb = len(ref_counts)
    total = 0.0
    for r, c in zip(ref_counts, cur_counts, strict=True):
        pr = (r + 0.5) / (nr + 0.5 * nb)
        pc = (c + 0.5) / (nc + 0.5 * nb)
        total += (pc - pr) * math.log(pc / pr)
    return total


def _bucket(edges: list[int], key: int) -> int:
    lo, hi = 0, len(edges)
    while lo < hi:  # first edge >= key
        mid = (lo + hi) // 2
        if edges[mid] < key:
            lo = mid + 1
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class TestOutcome:
    """One test's result: its name, statistic, p-value and effect size (with their names)."""

    test: str
    statistic: float
    p_value: float
    effect_name: str
    effect: float
    dof: float | None = None


def two_proportion(x1: int, n1: int, x2: int, n2: int) -> TestOutcome:
    """Two-proportion z-test (pooled); effect = rate difference p1 - p2."""
    if not n1 or not n2:
        return TestOutcome("two-proportion z", 0.0, 1.0, "rate difference", 0.0)
    p1, p2 = x1 / n1, x2 / n2
    pool = (x1 + x2) / (n1 + n2)
    se = math.sqrt(pool * (1 - pool) * (1 / n1 + 1 / n2))
    z = (0.0 if p1 == p2 else math.inf) if se == 0 else (p1 - p2) / se
    return TestOutcome("two-proportion z", z, two_sided_normal_p(z) if math.isfinite(z) else 0.0,
                       "rate difference", p1 - p2)


def welch(n1: int, mean1: float, var1: float, n2: int, mean2: float,
          var2: float) -> tuple[float, float, float]:
    """Welch's t statistic, its degrees of freedom and the two-sided p-value."""
    if n1 < 2 or n2 < 2:
        return 0.0, 0.0, 1.0
    s1, s2 = var1 / n1, var2 / n2
    se2 = s1 + s2
    if se2 == 0:
        return (0.0, 0.0, 1.0) if mean1 == mean2 else (math.inf, 0.0, 0.0)
    t = (mean1 - mean2) / math.sqrt(se2)
    dof = se2 * se2 / ((s1 * s1 / (n1 - 1) if s1 else 0.0) + (s2 * s2 / (n2 - 1) if s2 else 0.0)
                       or 1e-300)
    return t, dof, t_two_sided_p(t, dof)


def chi_square_homogeneity(a: dict[str, int], b: dict[str, int],
                           min_expected: float = 5.0) -> tuple[float, int, float, float, int]:
    """Chi-square test that two count tables come from one distribution.

    Categories whose expected count is below ``min_expected`` on either side are pooled into one.
    Returns (statistic, degrees of freedom, p-value, Cramér's V, categories used).
    """
    na, nb = sum(a.values()), sum(b.values())
    n = na + nb
    if not na or not nb:
        return 0.0, 0, 1.0, 0.0, 0
    keep: list[tuple[int, int]] = []
    pooled = [0, 0]
    for key in sorted(a.keys() | b.keys()):
        ca, cb = a.get(key, 0), b.get(key, 0)
        col = ca + cb
        if col * na / n < min_expected or col * nb / n < min_expected:
            pooled[0] += ca
            pooled[1] += cb
        else:
            keep.append((ca, cb))
    if sum(pooled):
        keep.append((pooled[0], pooled[1]))
    if len(keep) < 2:
        return 0.0, 0, 1.0, 0.0, len(keep)
    stat = 0.0
    for ca, cb in keep:
        col = ca + cb
        ea, eb = col * na / n, col * nb / n
        stat += (ca - ea) ** 2 / ea + (cb - eb) ** 2 / eb
    dof = len(keep) - 1
    v = math.sqrt(stat / n)  # Cramér's V for a 2 x k table (min(r, c) - 1 = 1)
    return stat, dof, chi2_sf(stat, dof), v, len(keep)
