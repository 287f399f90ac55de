"""Statistics for spread tests: is the kernel's choice of endpoint consistent with the expected odds?

`chi_square(observed, expected)` is Pearson's goodness-of-fit test: the statistic
sum((O - E)^2 / E) over the categories and its p-value from the chi-square distribution with k - 1
degrees of freedom, computed here through the regularized upper incomplete gamma function (series
for small x, continued fraction otherwise) so no SciPy is needed. `assert_spread` is what tests call:
it fails when an expected endpoint got nothing, when an unexpected one got anything, or when the
p-value is below `alpha` — with a few hundred connections over 2-5 endpoints, "one endpoint gets
everything" and "one gets nothing" give p-values far below any sane alpha, while a fair spread fails
only with probability alpha (keep it small, e.g. 1e-4, so tests are not flaky).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ChiSquare:
    statistic: float
    dof: int
    p_value: float


def upper_gamma_q(a: float, x: float) -> float:
    """Q(a, x) = Γ(a, x) / Γ(a), the regularized upper incomplete gamma function."""
    if x <= 0:
        return 1.0
    if x < a + 1:
        return 1.0 - lower_series(a, x)
    return upper_fraction(a, x)


def lower_series(a: float, x: float) -> float:
    term = total = 1.0 / a
    n = a
    for _ in range(1000):
        n += 1
        term *= x / n
        total += term
        if abs(term) < abs(total) * 1e-15:
            break
    return total * math.exp(-x + a * math.log(x) - math.lgamma(a))


def upper_fraction(a: float, x: float) -> float:
    """Lentz's continued fraction for Q(a, x), valid for x >= a + 1."""
    tiny = 1e-300
    b = x + 1 - a
    c = 1 / tiny
    d = 1 / b
    h = d
    for i in range(1, 1000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return math.exp(-x + a * math.log(x) - math.lgamma(a)) * h


def chi_square(observed: Mapping[Any, int], expected: Mapping[str, float]) -> ChiSquare:
    """Goodness of fit of `observed` counts to `expected` probabilities (normalised here)."""
    total = sum(observed.values())
    weight = sum(expected.values())
    if total == 0 or weight <= 0 or len(expected) < 2:
        raise ValueError("chi-square needs observations and at least two expected categories")
    stat = 0.0
    for key, p in expected.items():
        e = total * p / weight
        stat += (observed.get(key, 0) - e) ** 2 / e
    dof = len(expected) - 1
    return ChiSquare(stat, dof, upper_gamma_q(dof / 2, stat / 2))


def uniform(keys: Iterable[str]) -> dict[str, float]:
    return {k: 1.0 for k in keys}


def assert_spread(observed: Mapping[str, int] | Iterable[str | None], expected: Mapping[str, float] | Iterable[str],
                  *, alpha: float = 1e-4) -> ChiSquare:
    """Fail unless every expected key was hit, nothing else was, and the fit's p-value >= alpha.

    `observed` is counts or the raw sequence of backends (e.g. `[r.backend for r in replies]`);
    `expected` is probabilities or just the keys (uniform).
    """
    counts: dict[Any, int] = dict(observed) if isinstance(observed, Mapping) else dict(Counter(observed))
    given = dict(expected) if isinstance(expected, Mapping) else uniform(expected)
    odds = {k: p for k, p in given.items() if p > 0}
    unexpected = {k: n for k, n in counts.items() if k not in odds and n}
    assert not unexpected, f"unexpected backends answered: {unexpected} (expected only {sorted(odds)})"
    missing = sorted(k for k in odds if not counts.get(k))
    assert not missing, f"never reached: {missing}; counts {counts}"
    if len(odds) < 2:
        return ChiSquare(0.0, 0, 1.0)
    result = chi_square(counts, odds)
    assert result.p_value >= alpha, (
        f"spread {counts} does not fit {odds}: chi2={result.statistic:.1f} dof={result.dof} p={result.p_value:.2g}")
    return result
