"""Sketches and tests: mergeable, bounded, and the p-values agree with SciPy."""

from __future__ import annotations

import math

import pytest

from ckptrescue.datasets.profiles import stats
from ckptrescue.datasets.profiles.minhash import NearDup
from ckptrescue.datasets.profiles.sketches import BottomK, DupSample, LogHistogram, Moments, TopK, bin_of


def test_bins_preserve_order_and_small_integers() -> None:
    values = [-1e9, -3.5, -1.0, 0.0, 1e-300, 0.1, 1.0, 2.0, 3.0, 31.0, 1e6, 1e300]
    keys = [bin_of(v) for v in values]
    assert keys == sorted(keys)
    assert len({bin_of(float(i)) for i in range(32)}) == 32


def test_moments_merge_equals_one_pass() -> None:
    xs = [float(i * i % 17) for i in range(100)]
    one = Moments()
    for x in xs:
        one.add(x)
    a, b = Moments(), Moments()
    for x in xs[:37]:
        a.add(x)
    for x in xs[37:]:
        b.add(x)
    a.merge(b)
    assert a.n == one.n and math.isclose(a.mean, one.mean) and math.isclose(a.m2, one.m2)
    assert (a.min, a.max) == (one.min, one.max)


def test_topk_is_exact_until_full_then_bounded() -> None:
    t = TopK(k=4)
    for i in range(100):
        t.add(str(i % 3))
    assert t.exact and t.counts == {"0": 34, "1": 33, "2": 33}
    for i in range(1000):
        t.add(f"x{i}")
        if i % 2:
            t.add("0")
    assert not t.exact and len(t.counts) <= 4
    assert t.counts["0"] >= 534 - t.decrements  # Misra-Gries: low by at most `decrements`
    assert t.top(1)[0][0] == "0"


def test_dup_sample_is_exact_then_sampled() -> None:
    d = DupSample(capacity=100)
    for i in range(50):
        d.add(i * 7919 % (1 << 64))
        d.add(i * 7919 % (1 << 64))
    assert d.sampled == 100 and d.duplicates == 50
    big = DupSample(capacity=64)
    for i in range(10_000):
        h = (i * 0x9E3779B97F4A7C15) % (1 << 64)
        big.add(h)
        if i % 4 == 0:
            big.add(h)
    assert len(big.seen) <= 64
    assert 0.1 < big.duplicates / big.sampled < 0.3  # true rate 2500/12500 = 0.2


def test_bottom_k_jaccard() -> None:
    a, b = BottomK(k=128), BottomK(k=128)
    for i in range(2000):
        h = (i * 0x9E3779B97F4A7C15) % (1 << 64)
        a.add(h)
        if i < 1000:
            b.add(h)
    j, _shared, k = a.jaccard(b)
    assert k == 128 and 0.35 < j < 0.65  # true Jaccard 0.5


def test_near_duplicates() -> None:
    nd = NearDup()
    base = ("the quick brown fox jumps over the lazy dog near the river bank; later that "
            "evening seven wizards quietly packed twelve boxes of liquor jugs for the journey "
            "north, where a cold wind met them at the border of the old kingdom today")
    nd.add(base)
    nd.add(base.replace("today", "again"))
    nd.add("something entirely different that shares nothing with the fox sentence at all")
    nd.finish()
    assert (nd.checked, nd.near) == (3, 1)


def test_p_values_agree_with_scipy() -> None:
    sp = pytest.importorskip("scipy.stats")
    for x, dof in ((3.0, 1), (10.0, 4), (50.0, 30), (0.5, 7)):
        assert math.isclose(stats.chi2_sf(x, dof), sp.chi2.sf(x, dof), rel_tol=1e-7)
    for t, dof in ((2.0, 5.0), (0.3, 40.0), (5.0, 12.5)):
        assert math.isclose(stats.t_two_sided_p(t, dof), 2 * sp.t.sf(abs(t), dof), rel_tol=1e-7)
    assert math.isclose(stats.kolmogorov_sf(1.0), sp.kstwobign.sf(1.0), rel_tol=1e-7)
    assert math.isclose(stats.normal_sf(1.7), sp.norm.sf(1.7), rel_tol=1e-9)


def test_ks_and_psi_on_histograms() -> None:
    a, b, c = LogHistogram(), LogHistogram(), LogHistogram()
    for i in range(1, 500):
        a.add(i)
        b.add(i)
        c.add(2 * i)
    assert stats.ks_distance(a, b) == 0.0 and stats.psi(a, b) < 1e-9
    assert stats.ks_distance(a, c) > 0.4 and stats.psi(a, c) > 0.25
    assert stats.ks_p(0.0, 100, 100) == 1.0
