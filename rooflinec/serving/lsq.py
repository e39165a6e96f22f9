"""Levenberg-Marquardt least squares in NumPy (scipy is not a dependency; a few parameters
and a forward-difference Jacobian are all these fits need)."""

from __future__ import annotations

import numpy as np

ITERATIONS = 200


def minimise(residual, x0: np.ndarray, iterations: int = ITERATIONS, tolerance: float = 1e-9) -> np.ndarray:
    """The x (near x0) minimising sum(residual(x)^2); stops when a step moves no coordinate by
    1e-7 or improves the sum by less than `tolerance` of itself."""
    x, damping = np.asarray(x0, float), 1e-3
    r = residual(x)
    for _ in range(iterations):
        jac = jacobian(residual, x, r)
        # sums, not BLAS matmuls: a tall-thin product gains nothing from BLAS threads, which
        # spin and stall on a busy machine
        grad, hess = (jac * r[:, None]).sum(0), (jac[:, :, None] * jac[:, None, :]).sum(0)
        step = np.linalg.solve(hess + damping * np.diag(np.diag(hess) + 1e-12), -grad)
        trial = residual(x + step)
        if _sq(trial) < _sq(r):
            gain = _sq(r) - _sq(trial)
            x, r, damping = x + step, trial, damping / 3
            if np.abs(step).max() < 1e-7 or gain < tolerance * _sq(r):
                break
        else:
            damping *= 4
            if damping > 1e12:
                break
    return x


def _sq(r: np.ndarray) -> float:
    return float((r * r).sum())


def jacobian(residual, x: np.ndarray, r: np.ndarray, h: float = 1e-6) -> np.ndarray:
    cols = []
    for i in range(len(x)):
        dx = np.zeros_like(x)
        dx[i] = h
        cols.append((residual(x + dx) - r) / h)
    return np.array(cols).T
