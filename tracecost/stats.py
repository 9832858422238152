"""Statistics every suite reports (docs/methodology.md, "Statistics").

Spread is always labelled: `sd` is the sample standard deviation, `ci95` the
95% confidence interval of the mean from Student's t-distribution (not 1.96).
Comparisons of two methods use Welch's t for a difference of means and the
delta method (with Welch-Satterthwaite degrees of freedom) for a ratio.
Undefined values are None, never NaN, so the JSON stays valid.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as scipy_stats

CONFIDENCE = 0.95

# How the comparisons' 95% CIs are computed, as the report's notes say it.
COMPARISON_CIS = "ratios by the delta method with Welch-Satterthwaite df, differences by Welch's t"
RATIO_CI = "the delta method with Welch-Satterthwaite df"
QUANTILE_CI = (
    "distribution-free, from order statistics with binomial coverage of at least 95% (none where the runs are too few)"
)


def _t_quantile(df: float) -> float:
    return float(scipy_stats.t.ppf(0.5 + CONFIDENCE / 2, df))


def _finite(value: float) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def summarize(values: Sequence[float]) -> dict:
    """n, mean, sd, median, min, max and the t-based 95% CI of the mean."""
    data = np.asarray(values, dtype=float)
    n = len(data)
    if n == 0:
        return {
            "n": 0,
            "mean": None,
            "sd": None,
            "median": None,
            "min": None,
            "max": None,
            "ci95_low": None,
            "ci95_high": None,
        }
    mean = float(data.mean())
    sd = float(data.std(ddof=1)) if n > 1 else None
    half = _t_quantile(n - 1) * sd / math.sqrt(n) if sd is not None else None
    return {
        "n": n,
        "mean": mean,
        "sd": sd,
        "median": float(np.median(data)),
        "min": float(data.min()),
        "max": float(data.max()),
        "ci95_low": _finite(mean - half) if half is not None else None,
        "ci95_high": _finite(mean + half) if half is not None else None,
    }


def quantile(values: Sequence[float], q: float) -> dict:
    """The q-quantile (numpy's linear interpolation between order statistics) with a
    distribution-free 95% CI: the order statistics x_(l) <= x_(u) with P(l <= B < u) >= 95% for
    B ~ Binomial(n, q), the number of values below the true quantile (the textbook interval for
    a quantile, with no assumption on the distribution: latencies are skewed). Each bound is None
    where n is too small to have one (the median needs 6 values for both; p99's upper bound needs
    459)."""
    data = np.sort(np.asarray(values, dtype=float))
    n = len(data)
    if n == 0:
        return {"value": None, "ci95_low": None, "ci95_high": None}
    tail = (1 - CONFIDENCE) / 2
    cdf = scipy_stats.binom.cdf(np.arange(n + 1), n, q)  # cdf[k] = P(B <= k)
    # Lower bound x_(l) (1-based): the largest l with P(B <= l - 1) <= tail; upper bound x_(u):
    # the smallest u with P(B <= u - 1) >= 1 - tail. Coverage P(l <= B <= u - 1) >= 95%.
    below = np.flatnonzero(cdf[:n] <= tail)
    above = np.flatnonzero(cdf[:n] >= 1 - tail)
    return {
        "value": float(np.quantile(data, q)),
        "ci95_low": float(data[below[-1]]) if len(below) else None,
        "ci95_high": float(data[above[0]]) if len(above) else None,
    }


def _welch(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float] | None:
    """(variance of mean a, variance of mean b, Welch-Satterthwaite df), or None if undefined."""
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    if va + vb == 0:
        return va, vb, math.inf
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return va, vb, df


def difference(treated: Sequence[float], control: Sequence[float], divisor: float = 1.0) -> dict:
    """(mean(treated) - mean(control)) / divisor with a Welch 95% CI, and its standard error `se`
    and Welch-Satterthwaite `df` (for ratios of such estimates: see `ratio`)."""
    a, b = np.asarray(treated, dtype=float), np.asarray(control, dtype=float)
    undefined = {"ci95_low": None, "ci95_high": None, "se": None, "df": None}
    if len(a) == 0 or len(b) == 0:
        return {"value": None, **undefined}
    value = float(a.mean() - b.mean()) / divisor
    welch = _welch(a, b)
    if welch is None:
        return {"value": value, **undefined}
    va, vb, df = welch
    se = math.sqrt(va + vb) / abs(divisor)
    half = (_t_quantile(df) if math.isfinite(df) else 0.0) * se
    return {
        "value": value,
        "ci95_low": value - half,
        "ci95_high": value + half,
        "se": se,
        "df": df if math.isfinite(df) else None,
    }


# The difference a verdict that cannot decide names the runs for, where the observed one is smaller:
# 5% of the larger figure (docs/methodology.md, "Runs that would decide").
RESOLVABLE_FRACTION = 0.05
# Beyond this many runs per cell, the estimate is "more than" it.
MOST_RUNS = 10_000


def runs_to_separate(halves: Sequence[float], n: int, difference: float, df_of=lambda m: m - 1) -> int | None:
    """The fewest runs per cell m >= n at which 95% CIs whose half-widths are `halves` at n runs would
    total less than `difference`: each half-width scales as t(df_of(m)) / sqrt(m), the spread of
    the runs staying what it was (for two CIs apart, `halves` holds both; for the CI of a
    difference, its one half-width and the difference's own df). None beyond MOST_RUNS, or where
    nothing is to resolve (no difference, no spread, fewer than 2 runs)."""
    if n < 2 or difference <= 0 or not all(h is not None and math.isfinite(h) for h in halves):
        return None
    spread = sum(halves) / _t_quantile(df_of(n)) * math.sqrt(n)  # the half-widths' sum at t = 1, n = 1
    if spread <= 0:
        return None

    def width(m: int) -> float:
        return _t_quantile(df_of(m)) * spread / math.sqrt(m)

    low, high = n - 1, MOST_RUNS + 1
    if width(high) >= difference:
        return None
    while high - low > 1:  # the width falls as m grows: bisect
        middle = (low + high) // 2
        if width(middle) < difference:
            high = middle
        else:
            low = middle
    return high


def excludes_zero(estimate: dict) -> bool:
    """Whether an estimate's 95% CI lies wholly on one side of 0: for a `difference`, Welch's t-test
    rejecting equal means at the 5% level. False when the CI is undefined (fewer than 2 values a side)."""
    low, high = estimate.get("ci95_low"), estimate.get("ci95_high")
    return low is not None and high is not None and not low <= 0 <= high


def ratio(numerator: dict, denominator: dict, covariance: float = 0.0) -> dict:
    """numerator / denominator of two estimates with `se` and `df` (see `difference`), 95% CI by the
    delta method: Var(a/b) ~ (Var a + r^2 Var b - 2 r Cov(a, b)) / b^2, with the smaller df.
    `covariance`: Cov(a, b), when both estimates share a term (e.g. the same baseline)."""
    a, b = numerator.get("value"), denominator.get("value")
    if a is None or b is None or b == 0:
        return {"value": None, "ci95_low": None, "ci95_high": None}
    value = a / b
    se_a, se_b = numerator.get("se"), denominator.get("se")
    if se_a is None or se_b is None:
        return {"value": value, "ci95_low": None, "ci95_high": None}
    variance = max(0.0, (se_a**2 + value**2 * se_b**2 - 2 * value * covariance) / b**2)
    dfs = [df for df in (numerator.get("df"), denominator.get("df")) if df is not None]
    half = (_t_quantile(min(dfs)) if dfs else 0.0) * math.sqrt(variance)
    return {"value": value, "ci95_low": value - half, "ci95_high": value + half}


def ratio_of_means(treated: Sequence[float], control: Sequence[float]) -> dict:
    """mean(treated) / mean(control), 95% CI by the delta method with Welch-Satterthwaite df."""
    a, b = np.asarray(treated, dtype=float), np.asarray(control, dtype=float)
    if len(a) == 0 or len(b) == 0 or b.mean() == 0:
        return {"value": None, "ci95_low": None, "ci95_high": None}
    value = float(a.mean() / b.mean())
    welch = _welch(a, b)
    if welch is None:
        return {"value": value, "ci95_low": None, "ci95_high": None}
    va, vb, df = welch
    # Var(R) ~ R^2 (Var(mean a)/mean a^2 + Var(mean b)/mean b^2)
    se = value * math.sqrt(va / a.mean() ** 2 + vb / b.mean() ** 2) if a.mean() else 0.0
    half = (_t_quantile(df) if math.isfinite(df) else 0.0) * se
    return {"value": value, "ci95_low": value - half, "ci95_high": value + half}


def overhead_percent(treated: Sequence[float], control: Sequence[float]) -> dict:
    """(mean(treated) / mean(control) - 1) x 100, with the ratio's 95% CI."""
    return {
        key: None if value is None else (value - 1) * 100 for key, value in ratio_of_means(treated, control).items()
    }


def variance_of_mean(values: Sequence[float]) -> float:
    """s^2 / n (0 for fewer than two values)."""
    data = np.asarray(values, dtype=float)
    return float(data.var(ddof=1) / len(data)) if len(data) > 1 else 0.0
