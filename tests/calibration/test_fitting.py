"""The fitting helpers: non-negative, robust, relative; monotone tables."""

from __future__ import annotations

import numpy as np
import pytest

from calibration.fitting import fit_linear, isotonic, nnls, predict, relative_errors, table, thin


def test_nnls_recovers_non_negative_coefficients():
    rng = np.random.default_rng(0)
    a = rng.random((60, 4))
    x = np.array([1.0, 0.0, 2.0, 0.5])
    got = nnls(a, a @ x)
    assert np.allclose(got, x, atol=1e-8)
    assert (nnls(a, a @ np.array([1.0, -1.0, 2.0, 0.5])) >= 0).all()


def test_fit_is_robust_to_disturbed_runs():
    rng = np.random.default_rng(1)
    sizes = rng.uniform(1, 100, 200)
    seconds = 0.002 + 0.001 * sizes
    seconds[::10] *= 3  # one run in ten slowed down by another process
    fit = fit_linear(["const", "size"], [{"size": s} for s in sizes], seconds)
    assert fit.coef == pytest.approx([0.002, 0.001], rel=1e-3)
    assert fit.ranges["size"] == (pytest.approx(sizes.min()), pytest.approx(sizes.max()))
    assert predict(fit, {"size": 10}) == pytest.approx(0.012, rel=1e-3)
    err = relative_errors(fit, [{"size": s} for s in sizes], seconds)
    assert np.median(np.abs(err)) < 1e-3


def test_fit_needs_enough_points():
    with pytest.raises(ValueError, match="cannot fit"):
        fit_linear(["const", "a", "b"], [{"a": 1, "b": 2}], [1.0])


def test_tables_are_monotone_and_merge_repeats():
    assert isotonic([1, 3, 2, 4, 0, 5]).tolist() == [1, 2.25, 2.25, 2.25, 2.25, 5]
    t = table([(4, 2e-3), (1, 1e-3), (2, 3e-3), (8, 5e-3), (1, 3e-3)])
    assert t.x == [1, 2, 4, 8]
    assert t.seconds == sorted(t.seconds)
    assert t.seconds[0] == pytest.approx(2e-3)  # median of the two runs at 1, then pooled


def test_thin_keeps_the_ends():
    x = np.arange(1, 1001, dtype=float)
    tx, ty = thin(x, 2 * x, 20)
    assert len(tx) <= 22 and tx[0] == 1 and tx[-1] == 1000
    assert np.allclose(ty, 2 * tx)
