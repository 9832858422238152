"""Statistics against values worked out by hand or by the textbook formula."""

import math

import numpy as np
import pytest

from tracecost.stats import difference, overhead_percent, quantile, ratio, summarize


def test_summary_of_known_values():
    s = summarize([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0])
    assert s["n"] == 8 and s["mean"] == 5.0 and s["median"] == 4.5
    assert s["min"] == 2.0 and s["max"] == 9.0
    assert s["sd"] == pytest.approx(2.138089935, rel=1e-9)
    # t(0.975, 7) = 2.364624252; half-width = t * sd / sqrt(8)
    half = 2.364624252 * 2.138089935 / math.sqrt(8)
    assert s["ci95_low"] == pytest.approx(5 - half, rel=1e-8)
    assert s["ci95_high"] == pytest.approx(5 + half, rel=1e-8)


def test_t_interval_is_wider_than_normal_at_small_n():
    s = summarize([10.0, 12.0, 14.0])
    half = s["ci95_high"] - s["mean"]
    # t(0.975, 2) = 4.302652730 against the normal's 1.96
    assert half == pytest.approx(4.302652730 * 2.0 / math.sqrt(3), rel=1e-8)


def test_single_and_empty_samples_give_null_not_nan():
    one = summarize([3.0])
    assert one["mean"] == 3.0 and one["sd"] is None and one["ci95_low"] is None
    assert summarize([])["mean"] is None


def test_difference_uses_welch():
    a, b = [10.0, 11.0, 12.0], [1.0, 2.0, 3.0, 4.0]
    d = difference(a, b)
    assert d["value"] == pytest.approx(8.5)
    va, vb = 1.0 / 3, (5 / 3) / 4
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 3)
    from scipy.stats import t

    half = t.ppf(0.975, df) * math.sqrt(va + vb)
    assert d["ci95_low"] == pytest.approx(8.5 - half) and d["ci95_high"] == pytest.approx(8.5 + half)


def test_overhead_percent_value_and_interval():
    o = overhead_percent([150.0, 150.0, 150.0], [100.0, 100.0, 100.0])
    assert o["value"] == pytest.approx(50.0)
    assert o["ci95_low"] == pytest.approx(50.0) and o["ci95_high"] == pytest.approx(50.0)
    noisy = overhead_percent([140.0, 150.0, 160.0], [95.0, 100.0, 105.0])
    assert noisy["ci95_low"] < 50.0 < noisy["ci95_high"]


def test_overhead_against_zero_baseline_is_null():
    assert overhead_percent([1.0], [0.0])["value"] is None


def test_difference_with_a_divisor_divides_value_interval_and_standard_error():
    treated, control = [110.0, 130.0, 120.0], [10.0, 12.0, 14.0]
    whole, per_op = difference(treated, control), difference(treated, control, 10.0)
    assert per_op["value"] == pytest.approx(whole["value"] / 10)
    assert per_op["ci95_low"] == pytest.approx(whole["ci95_low"] / 10)
    assert per_op["ci95_high"] == pytest.approx(whole["ci95_high"] / 10)
    assert per_op["se"] == pytest.approx(math.sqrt(100 / 3 + 4 / 3) / 10)
    assert 2 <= per_op["df"] <= 4


def test_ratio_by_the_delta_method():
    a = {"value": 100.0, "se": 4.0, "df": 10.0}
    b = {"value": 10.0, "se": 1.0, "df": 20.0}
    r = ratio(a, b)
    # Var = (16 + 100 * 1) / 100 = 1.16; t(0.975, 10) = 2.228138852
    half = 2.228138852 * math.sqrt(1.16)
    assert r["value"] == 10.0
    assert r["ci95_low"] == pytest.approx(10 - half, rel=1e-8) and r["ci95_high"] == pytest.approx(10 + half, rel=1e-8)
    # A shared term (positive covariance) narrows the interval of the ratio.
    assert ratio(a, b, covariance=2.0)["ci95_high"] < r["ci95_high"]
    assert ratio(a, {"value": 0.0, "se": 1.0, "df": 5.0})["value"] is None


def test_ratio_of_means_by_the_delta_method():
    from tracecost.stats import ratio_of_means

    r = ratio_of_means([20.0, 22.0, 24.0], [10.0, 10.0, 10.0])
    assert r["value"] == pytest.approx(2.2)
    # Var(mean a) = 4/3, Var(mean b) = 0: se = 2.2 * sqrt((4/3) / 22^2); df = 2
    half = 4.302652730 * 2.2 * math.sqrt((4 / 3) / 22**2)
    assert r["ci95_low"] == pytest.approx(2.2 - half) and r["ci95_high"] == pytest.approx(2.2 + half)


def test_quantile_cis_are_order_statistics_defined_only_from_enough_values():
    # n = 5: P(all 5 on one side of the median) = 2 x 1/32 > 5%: no interval of order statistics covers 95%.
    assert quantile([1, 2, 3, 4, 5], 0.5) == {"value": 3.0, "ci95_low": None, "ci95_high": None}
    # n = 6: [min, max] covers 1 - 2/64 = 96.9%.
    assert quantile([6, 1, 5, 2, 4, 3], 0.5) == {"value": 3.5, "ci95_low": 1.0, "ci95_high": 6.0}
    # p99 of 10 values: a lower bound (x_(9): P(B <= 8) = 0.4%), no upper one (needs 459 values).
    p99 = quantile(range(1, 11), 0.99)
    assert p99["ci95_low"] == 9.0 and p99["ci95_high"] is None and p99["value"] == pytest.approx(9.91)
    assert quantile([], 0.5)["value"] is None


@pytest.mark.parametrize("q", [0.5, 0.9])
def test_quantile_ci_covers_the_true_quantile_at_least_95_percent_of_the_time(q):
    # Skewed data (exponential, as latencies): true q-quantile = -ln(1 - q). Fixed seed: the same every run.
    rng = np.random.default_rng(7)
    truth = -math.log(1 - q)
    trials = 2000
    covered = sum(
        e["ci95_low"] <= truth <= e["ci95_high"] for e in (quantile(rng.exponential(size=60), q) for _ in range(trials))
    )
    assert covered / trials >= 0.94  # >= 95% by construction; 1 point of slack for 2000 trials


@pytest.mark.parametrize("spread", [1.0, 5.0, 20.0])
def test_runs_to_separate_is_the_first_run_count_whose_cis_no_longer_overlap(spread):
    from tracecost.stats import _t_quantile, runs_to_separate

    rng = np.random.default_rng(7)
    a, b = summarize(rng.normal(100, spread, 4)), summarize(rng.normal(104, spread, 4))
    halves = [(s["ci95_high"] - s["ci95_low"]) / 2 for s in (a, b)]
    target = 4.0
    m = runs_to_separate(halves, 4, target)
    assert m is not None and m >= 4

    def width(runs: int) -> float:  # the two half-widths at `runs`, the spread of the 4 runs kept
        return sum(h * math.sqrt(4) / _t_quantile(3) * _t_quantile(runs - 1) / math.sqrt(runs) for h in halves)

    assert width(m) < target and (m == 4 or target <= width(m - 1))


def test_runs_to_separate_says_none_where_nothing_can_be_resolved():
    from tracecost.stats import MOST_RUNS, runs_to_separate

    assert runs_to_separate([1.0, 1.0], 4, 0.0) is None  # no difference to resolve
    assert runs_to_separate([1.0, 1.0], 1, 1.0) is None  # no spread known from one run
    assert runs_to_separate([1e6, 1e6], 4, 1.0) is None  # beyond MOST_RUNS
    assert runs_to_separate([1.0, 1.0], 4, 10.0) == 4 and MOST_RUNS == 10_000  # apart already
