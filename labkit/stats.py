"""Student's t, for intervals from a handful of runs (pure logic; the standard library has only the normal).

A comparison of a few runs per arm has few degrees of freedom: its interval must use Student's
t, not the normal, or two runs would look as sure as twenty. :func:`t_quantile` inverts the t
distribution's CDF, computed from the regularized incomplete beta function (the continued
fraction of Numerical Recipes, ch. 6.4), by bisection.

>>> round(t_quantile(0.975, 2), 3), round(t_quantile(0.975, 1), 2), round(t_quantile(0.975, 30), 3)
(4.303, 12.71, 2.042)
"""

from __future__ import annotations

import math
import statistics


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, epsilon = 1e-300, 3e-16
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < epsilon:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b).

    >>> round(incomplete_beta(2, 3, 0.4), 6)  # 1 - (1-x)^4 - 4x(1-x)^3 for a=2, b=3
    0.5248
    """
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom.

    >>> round(t_cdf(0.0, 3), 3), round(t_cdf(2.776, 4), 3)
    (0.5, 0.975)
    """
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (0 < p < 1)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p={p}: a quantile needs 0 < p < 1")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2.0
    for _ in range(200):
        middle = (low + high) / 2.0
        if t_cdf(middle, df) < p:
            low = middle
        else:
            high = middle
        if high - low < 1e-10 * max(1.0, high):
            break
    return (low + high) / 2.0


def mean_interval(values: list[float], alpha: float) -> tuple[float, float, float] | None:
    """The mean of ``values`` and its two-sided ``1 - alpha`` interval (None with fewer than two values).

    >>> [round(v, 3) for v in mean_interval([1.0, 2.0, 3.0], 0.05)]
    [2.0, -0.484, 4.484]
    """
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    half = t_quantile(1.0 - alpha / 2.0, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def welch_interval(a: list[float], b: list[float], alpha: float) -> tuple[float, float, float] | None:
    """The difference of means ``mean(b) - mean(a)`` and its Welch interval (None unless each has two values).

    >>> [round(v, 3) for v in welch_interval([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], 0.05)]
    [3.0, 0.733, 5.267]
    """
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    difference = statistics.fmean(b) - statistics.fmean(a)
    if va + vb == 0.0:
        return difference, difference, difference
    df = (va + vb) ** 2 / ((va * va / (len(a) - 1) if va else 0.0) + (vb * vb / (len(b) - 1) if vb else 0.0))
    half = t_quantile(1.0 - alpha / 2.0, df) * math.sqrt(va + vb)
    return difference, difference - half, difference + half
