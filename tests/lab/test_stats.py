"""The chi-square helper: known values, and that it catches the failures spread tests look for."""

from __future__ import annotations

import random

import pytest

from netkit.lab.stats import assert_spread, chi_square, uniform, upper_gamma_q


@pytest.mark.parametrize(("a", "x", "q"), [
    (0.5, 1.92073, 0.05),  # chi2 dof 1 at the 95th percentile: 3.841
    (1.0, 2.0, 0.135335),  # exp(-2)
    (2.5, 10.0, 0.001250),  # chi2 dof 5, x = 20
    (5.0, 3.0, 0.815263),
    (50.0, 40.0, 0.929665),  # integer a: Poisson sum of e^-x x^k / k! for k < 50
])
def test_upper_gamma_matches_tables(a: float, x: float, q: float) -> None:
    assert upper_gamma_q(a, x) == pytest.approx(q, rel=1e-3)


def test_chi_square_of_a_perfect_fit_is_zero() -> None:
    result = chi_square({"a": 50, "b": 50, "c": 50}, uniform("abc"))
    assert result.statistic == 0 and result.dof == 2 and result.p_value == pytest.approx(1.0)


def test_weighted_expectation() -> None:
    assert chi_square({"a": 100, "b": 200}, {"a": 1, "b": 2}).p_value == pytest.approx(1.0)


def test_fair_random_spread_passes() -> None:
    rng = random.Random(7)
    assert_spread([rng.choice("abc") for _ in range(300)], "abc")


@pytest.mark.parametrize("observed", [
    ["a"] * 300,                      # one endpoint gets everything
    ["a"] * 150 + ["b"] * 150,        # one gets nothing
    ["a"] * 200 + ["b"] * 50 + ["c"] * 50,  # badly skewed
    ["a"] * 100 + ["b"] * 100 + ["c"] * 99 + [None],  # a failed connection
    ["a"] * 100 + ["b"] * 100 + ["c"] * 99 + ["d"],  # an endpoint that must not be used
])
def test_bad_spreads_fail(observed: list[str | None]) -> None:
    with pytest.raises(AssertionError):
        assert_spread(observed, "abc")


def test_zero_probability_endpoints_must_not_answer() -> None:
    assert_spread({"a": 10, "b": 12}, {"a": 0.5, "b": 0.5, "c": 0.0})
    with pytest.raises(AssertionError):
        assert_spread({"a": 10, "b": 12, "c": 1}, {"a": 0.5, "b": 0.5, "c": 0.0})
