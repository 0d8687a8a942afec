"""Worst-case search for the accuracy tool: inputs concentrated near the
kernels' switch points, and a local search from the worst ones found.

A maximum over a uniform sample misses a worst case that sits in a narrow
window (a branch of a kernel, a clamp, the edge of a binade). The search
spends part of each cell's points within a few ulps and a few parts in
10**9 of every place where a kernel changes its arithmetic, then walks from
the worst inputs to their neighbouring floats (of src and diff_dst, and of
beta) while the error grows.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

_LN2 = float(np.log(2.0))

# Values of t = beta * src where a float64 kernel changes its arithmetic
# (`jax_softplus._math64`): the clamps, where the reduction's k changes
# (t = (m + 1/2) ln 2), where the denominator's scale starts (k = 2) and
# stops (k = 1023), where D = 1 + exp(-t) crosses 2 (t = 0), where the
# forward op's log1p switches its reduction (e = 1/2), its tail (k < -60)
# and its clamp.
SWITCHES_F64 = {
    "backward": (
        0.0,
        -0.5 * _LN2,
        0.5 * _LN2,
        -1.5 * _LN2,
        1.5 * _LN2,
        -40.0,
        40.0,
        -1022.5 * _LN2,
        -1418.5,
        -745.0,
        -709.78,
    ),
    "forward": (
        0.0,
        -_LN2,
        _LN2,
        -0.5 * _LN2,
        0.5 * _LN2,
        -60.5 * _LN2,
        60.5 * _LN2,
        -1417.0,
        -708.4,
    ),
}
# ... of |t| where the float32 derivative families (`_wide`) and the
# float64 ones (`_derivatives`) change theirs, both signs taken.
SWITCHES_DERIVATIVES = (
    0.0,
    0.5 * _LN2,
    1.4,
    1.5434,
    17.0,
    38.0,
    170.0,
    700.0,
    1400.0,
)


def near(points, n, rng, relative=1e-9, ulps=64):
    """n values of t, each within `ulps` float64 ulps and `relative` of one of
    `points` (chosen at random)."""
    points = np.asarray(points, np.float64)
    centre = points[rng.integers(0, len(points), n)]
    width = np.abs(centre) * relative + ulps * np.spacing(
        np.maximum(np.abs(centre), 1.0)
    )
    return centre + rng.uniform(-1.0, 1.0, n) * width


def concentrated(n, lo, hi, points, rng, share=0.3):
    """n values of t in [lo, hi]: `share` of them near the switch points
    that fall in the interval (`near`), the rest uniform."""
    inside = [p for p in points if lo <= p <= hi]
    m = int(n * share) if inside else 0
    t = np.concatenate([rng.uniform(lo, hi, n - m), near(inside, m, rng)])
    return np.clip(t, lo, hi)


STEPS = (1, 2, 4, 16, 256, 4096, 1 << 16, 1 << 20)


def step(values, k, dtype):
    """Each value moved by k ulps of `dtype` (through the monotone integer
    order of the bits, so across 0 and binades); a step past the finite
    range leaves the value."""
    ints = {4: np.int32, 8: np.int64}[np.dtype(dtype).itemsize]
    low = np.int64(np.iinfo(ints).min)
    bits = np.asarray(values, dtype).view(ints).astype(np.int64)
    order = np.where(bits < 0, low - bits, bits) + np.int64(k)
    moved = np.where(order < 0, low - order, order).astype(ints).view(dtype)
    return np.where(np.isfinite(moved), moved, values).astype(dtype)


def refine(errors: Callable, inputs: dict, dtype, rounds=4, keep=32):
    """A local search from the worst of `inputs`.

    `inputs` maps names to arrays of one length (of `dtype`; a 0-d entry,
    such as a cell's beta, stays fixed), and `errors(inputs)` returns each
    element's error (NaN where it does not count). Each round takes the
    `keep` worst points and tries every one with each of its coordinates
    moved by +-k ulps (`STEPS`); the pool keeps the worst. Returns the
    largest error seen and the inputs where it occurs.
    """
    pool = {n: np.asarray(v) for n, v in inputs.items()}
    err = np.nan_to_num(np.asarray(errors(pool), np.float64), nan=-1.0)
    names = [n for n, v in pool.items() if v.ndim]
    for _ in range(rounds):
        top = np.argsort(err)[-keep:]
        top = top[err[top] >= 0]
        if not top.size:
            break
        base = {n: pool[n][top] for n in names}
        trial = {n: [] for n in names}
        for moving in names:
            for k in STEPS:
                for sign in (1, -1):
                    for n in names:
                        v = base[n]
                        trial[n].append(step(v, sign * k, dtype) if n == moving else v)
        trial = {n: np.concatenate(v) for n, v in trial.items()}
        trial.update({n: v for n, v in pool.items() if not v.ndim})
        trial_err = np.nan_to_num(np.asarray(errors(trial), np.float64), nan=-1.0)
        pool = {
            n: np.concatenate([pool[n][top], trial[n]]) if n in names else pool[n]
            for n in pool
        }
        err = np.concatenate([err[top], trial_err])
    j = int(np.argmax(err))
    return float(err[j]), {n: (v[j] if v.ndim else v) for n, v in pool.items()}
