"""Metrics against hand-computed values."""

import math

import numpy as np
import pytest

from tpuperf_cli import metrics


def test_mape_hand_values():
    assert metrics.mape([110, 90], [100, 100]) == pytest.approx(10.0)
    # |2-1|/1 = 100 %, |1-2|/2 = 50 %
    assert metrics.mape([2, 1], [1, 2]) == pytest.approx(75.0)
    assert math.isnan(metrics.mape([], []))


def test_mape_rejects_nonpositive_truth_and_length_mismatch():
    with pytest.raises(ValueError):
        metrics.mape([1.0], [0.0])
    with pytest.raises(ValueError):
        metrics.mape([1.0, 2.0], [1.0])


def test_kendall_tau_perfect_reversed_and_undefined():
    assert metrics.kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert metrics.kendall_tau([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(metrics.kendall_tau([1], [1]))
    assert math.isnan(metrics.kendall_tau([1, 1, 1], [1, 2, 3]))  # constant prediction


def test_kendall_tau_b_with_ties_hand_computed():
    # pairs: (0,1) C, (0,2) C, (0,3) C, (1,2) tied in x, (1,3) tied in y, (2,3) C
    # S = 4, n0 = 6, n1 = 1, n2 = 1 -> tau_b = 4 / sqrt(5 * 5) = 0.8
    assert metrics.kendall_tau([1, 2, 2, 3], [1, 3, 2, 3]) == pytest.approx(0.8)
    # one discordant pair among 3: S = 1, n0 = 3 -> 1/3
    assert metrics.kendall_tau([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)


def pairwise_tau_b(x, y):
    """The O(n^2) tau-b that metrics used before: every pair's signs counted."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = a.size
    i, j = np.triu_indices(n, 1)
    s = int((np.sign(a[i] - a[j]) * np.sign(b[i] - b[j])).sum())
    n0 = n * (n - 1) // 2
    n1 = int((np.sign(a[i] - a[j]) == 0).sum())
    n2 = int((np.sign(b[i] - b[j]) == 0).sum())
    return s / math.sqrt((n0 - n1) * (n0 - n2))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kendall_tau_equals_the_pairwise_count_with_ties(seed):
    rng = np.random.default_rng(seed)
    n = 1500
    x = rng.integers(0, 40, n).astype(float)            # many ties in x
    y = np.round(x * rng.lognormal(0, 0.5, n), 1)       # ties in y too, correlated
    assert metrics.kendall_tau(x, y) == pytest.approx(pairwise_tau_b(x, y), abs=1e-12)
    z = rng.random(n)                                   # no ties, uncorrelated
    assert metrics.kendall_tau(z, y) == pytest.approx(pairwise_tau_b(z, y), abs=1e-12)


def test_fusion_metrics_threshold():
    pred = [1000, 2000, 5500, 12000]
    true = [4000, 1000, 5000, 10000]
    r = metrics.fusion_metrics(pred, true, threshold_ns=5000)
    assert r["n"] == 2
    assert r["mape"] == pytest.approx((10 + 20) / 2)
    assert r["tau"] == pytest.approx(1.0)
    assert metrics.fusion_metrics(pred, true)["n"] == 4


# Two kernels. A: the model picks config 1 (20 ns) while config 0 (10 ns) is
# best; B: the model picks the best.
A = ([3, 1, 2], [10, 20, 30])
B = ([1, 2], [5, 6])


def test_tile_size_ape_hand_computed():
    # 100 * (|20 - 10| + |5 - 5|) / (10 + 5)
    assert metrics.tile_size_ape([A, B]) == pytest.approx(100 * 10 / 15)
    assert metrics.tile_size_ape([B]) == 0.0
    assert math.isnan(metrics.tile_size_ape([]))


def test_tile_choice_is_pessimistic_on_ties():
    # configs 0 and 1 tie on the prediction: the slower (20) counts as picked
    assert metrics.tile_size_ape([([1, 1, 2], [10, 20, 30])]) == pytest.approx(100.0)
    assert metrics.top_k_slowdown([([5, 5, 5], [10, 20, 30])], 1) == pytest.approx(200.0)


def test_top_k_slowdown_hand_computed():
    # A ranked by prediction: 20, 30, 10 -> top1 20/10-1 = 1, top2 1, top3 0
    # B: top1 0
    assert metrics.top_k_slowdown([A, B], 1) == pytest.approx(50.0)
    assert metrics.top_k_slowdown([A, B], 2) == pytest.approx(50.0)
    assert metrics.top_k_slowdown([A, B], 3) == pytest.approx(0.0)
    assert metrics.top_k_slowdown([A, B], 10) == pytest.approx(0.0)
    with pytest.raises(ValueError):
        metrics.top_k_slowdown([A], 0)


def test_mean_kernel_tau_and_tile_metrics():
    # A: pred order (1,2,3) vs true (10,20,30) -> pairs (0,1) D, (0,2) D, (1,2) C -> -1/3
    # B: +1 ; mean 1/3
    assert metrics.mean_kernel_tau([A, B]) == pytest.approx((1 - 1 / 3) / 2)
    r = metrics.tile_metrics([A, B])
    assert r["kernels"] == 2 and r["configs"] == 5
    assert r["top1"] == pytest.approx(50.0)
    assert r["tile_ape"] == pytest.approx(100 * 10 / 15)


def test_summaries_ignore_nan():
    rows = [{"mape": 10.0}, {"mape": math.nan}, {"mape": 30.0}, {"mape": 20.0}]
    med, avg = metrics.summarize(rows, ["mape"])
    assert med["mape"] == pytest.approx(20.0)
    assert avg["mape"] == pytest.approx(20.0)
    g = metrics.group_indices(["b", "a", "b"])
    assert list(g) == ["b", "a"] and g["b"].tolist() == [0, 2]
