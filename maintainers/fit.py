"""Polynomial fits behind the kernels' constants: `python maintainers/fit.py`.

Each polynomial in `jax_softplus._math` (float32), `jax_softplus._math64`
(float64) and `jax_softplus._wide` (float64 for float32 results) is a
weighted minimax fit, found here by the Remez exchange
algorithm on a grid, and rounded to its dtype one coefficient at a time.
The targets are evaluated and the linear systems solved in mpmath at 40
digits; the error is scanned in float64 with + - * / only for the float32
fits (3,001 points) and in mpmath for the float64 ones (1,001 points, whose
errors are below float64's resolution), so the result is the same on every
platform. The script prints the coefficients in the order the kernels store
them; `tests/test_constants.py` checks that they are the committed ones and
that each meets the bound its comment states. Needs mpmath (the `[bench]`
or `[test]` extra).

A fit approximates g(x) by p(x) = sum_j c_j x**j on [lo, hi], minimizing
max |w(x) (g(x) - p(x))|, where w turns the error of p into the error of
the quantity the kernel computes (for example relative to exp(r)).
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tools._common import require

try:
    import mpmath
except ImportError:  # main() says which extra installs it
    mpmath = None

_DPS = 40


@dataclass(frozen=True)
class Fit:
    """A weighted minimax problem and how `_math` stores its answer."""

    name: str  # the constant in `_math`
    lo: float
    hi: float
    degree: int
    target: Callable  # g(x), an mpmath function
    weight: Callable  # w(x) >= 0, an mpmath function
    highest_first: bool  # the order the kernel stores the coefficients in
    comment: str
    dtype: type = np.float32  # of the coefficients
    module: str = "_math"  # where the kernel keeps them


def _expm1_q(r):
    # (expm1(r) - r) / r**2: q in expm1(r) = r + r**2 q(r).
    return (mpmath.expm1(r) - r) / (r * r)


def _expm1_q_weight(r):
    # An error in q moves expm1(r) by r**2 times it; the kernel's error is
    # relative to exp(r) = 1 + expm1(r) (the denominator it feeds).
    return r * r / mpmath.exp(r)


def _exp_tail(r):
    # (exp(r) - 1) / r: P in exp(r) = 1 + r P(r), the constant term exact.
    return mpmath.expm1(r) / r


def _exp_tail_weight(r):
    return abs(r) / mpmath.exp(r)


def _log1p_p(f):
    # (log1p(f) - f + f**2 / 2) / f**3: P in log1p(f) = f - f**2/2 + f**3 P(f).
    return (mpmath.log1p(f) - f + f * f / 2) / f**3


def _log1p_p_weight(f):
    return abs(f**3 / mpmath.log1p(f))


def _recip(e):
    return 1 / (1 + e)


def _recip_weight(e):
    # The error of quad(e) (1 + e) - 1: relative to 1 / (1 + e).
    return 1 + e


def _log1p_r(z):
    # R(z) / z in log1p(f) = f - f**2/2 + s (f**2/2 + R(z)), z = s**2: with
    # f = 2 s / (1 - s), log1p(f) = 2 atanh(s) = 2 s + s R(z).
    s = mpmath.sqrt(z)
    return (2 * mpmath.atanh(s) / s - 2) / z


def _log1p_r_weight(z):
    # An error in R / z moves log1p(f) by s z times it, relative to
    # log1p(f) = 2 atanh(s).
    s = mpmath.sqrt(z)
    return z * s / (2 * mpmath.atanh(s))


_HALF_LN2 = float(np.log(2.0) / 2)

FITS = (
    Fit(
        "_EXPM1_Q", -_HALF_LN2, _HALF_LN2, 4, _expm1_q, _expm1_q_weight, True,
        "q in expm1(r) = r + r**2 q(r), error relative to exp(r)",
    ),
    Fit(
        "_EXP_Q4", -_HALF_LN2, _HALF_LN2, 3, _exp_tail, _exp_tail_weight, True,
        "exp(r) = 1 + r P(r), relative error; the 1 is appended exactly",
    ),
    Fit(
        "_LOG1P_P", -0.25, 0.5, 8, _log1p_p, _log1p_p_weight, False,
        "P in log1p(f) = f - f**2/2 + f**3 P(f), relative error",
    ),
    Fit(
        "_RECIP_1P", 0.0, 1.0, 2, _recip, _recip_weight, True,
        "1 / (1 + e), relative error",
    ),
    # float64: k may be off by one from the nearest (the rounded z / ln 2),
    # so the interval is widened by 1e-4.
    Fit(
        "_EXP_Q", -_HALF_LN2 * 1.0001, _HALF_LN2 * 1.0001, 10, _expm1_q,
        _expm1_q_weight, True,
        "q in expm1(r) = r + r**2 q(r), error relative to exp(r)",
        np.float64, "_math64",
    ),
    Fit(
        "_LOG1P_R", 0.0, 0.0401, 7, _log1p_r, _log1p_r_weight, True,
        "R(z) / z in log1p(f) = f - f**2/2 + s (f**2/2 + R(z)), z = s**2, "
        "relative error",
        np.float64, "_math64",
    ),
    # float64 evaluation of float32 derivatives: 2**-35 is enough.
    Fit(
        "_EXP_Q", -_HALF_LN2 * 1.0001, _HALF_LN2 * 1.0001, 6, _expm1_q,
        _expm1_q_weight, True,
        "q in expm1(r) = r + r**2 q(r), error relative to exp(r)",
        np.float64, "_wide",
    ),
    Fit(
        "_LOG1P_P", -0.25, 0.5, 10, _log1p_p, _log1p_p_weight, False,
        "P in log1p(f) = f - f**2/2 + f**3 P(f), relative error",
        np.float64, "_wide",
    ),
)  # fmt: skip


def _grid(lo, hi, n):
    """n + 1 points of [lo, hi], without 0 (where some targets are 0 / 0)."""
    lo, hi = mpmath.mpf(lo), mpmath.mpf(hi)
    pts = [lo + (hi - lo) * i / n for i in range(n + 1)]
    return [x for x in pts if x != 0]


@functools.cache
def _samples(fit: Fit, points: int):
    """The grid (mpmath), and the target and weight on it (float64)."""
    with mpmath.workdps(_DPS):
        xs = _grid(fit.lo, fit.hi, points)
        g = np.array([float(fit.target(x)) for x in xs])
        w = np.array([float(fit.weight(x)) for x in xs])
    return xs, g, w


def _alternating_extrema(err, count):
    """Indices of `count` extrema of err that alternate in sign: the largest
    of each run of one sign, then the smallest removed (an end one, or an
    inner one merged with its neighbours) until `count` remain."""
    peaks = []
    for i, e in enumerate(err):
        if e == 0:
            continue
        if peaks and (err[peaks[-1]] > 0) == (e > 0):
            if abs(e) > abs(err[peaks[-1]]):
                peaks[-1] = i
        else:
            peaks.append(i)
    while len(peaks) > count:
        j = min(range(len(peaks)), key=lambda k: abs(err[peaks[k]]))
        if j in (0, len(peaks) - 1) or len(peaks) == count + 1:
            # Drop an end one: the smaller end keeps the rest alternating.
            end = 0 if abs(err[peaks[0]]) < abs(err[peaks[-1]]) else -1
            peaks.pop(end)
        else:
            keep = max(peaks[j - 1], peaks[j + 1], key=lambda k: abs(err[k]))
            peaks[j - 1 : j + 2] = [keep]
    if len(peaks) < count:
        raise RuntimeError(f"only {len(peaks)} alternating extrema, need {count}")
    return peaks


def remez(fit: Fit, fixed=(), points: int = 3000, iterations: int = 40):
    """The weighted minimax coefficients (lowest first, mpmath) and the
    levelled error |E|, with the lowest `len(fixed)` coefficients fixed at
    the values given.

    The reference points are exchanged until they repeat; the error is
    scanned in float64 (only +, -, *, /: the same bits on every platform)
    and the linear system is solved in mpmath.
    """
    if fit.dtype == np.float64:
        return _remez_mp(fit, fixed, iterations)
    xs, g, w = _samples(fit, points)
    xf = np.array([float(x) for x in xs])
    # What the free coefficients (powers m, m + 1, ...) must fit, weighted
    # so that the error is still that of the whole polynomial.
    m = len(fixed)
    xm = np.ones_like(xf)
    for _ in range(m):  # products, not `pow`, whose last bit is the libm's
        xm = xm * xf
    g = (g - np.polyval(np.array(fixed[::-1], np.float64), xf)) / xm
    w = w * np.abs(xm)
    n = fit.degree + 1 - m
    # The first reference: the grid points nearest n + 1 Chebyshev points.
    cheb = (fit.lo + fit.hi) / 2 - (fit.hi - fit.lo) / 2 * np.cos(
        np.pi * np.arange(n + 1) / n
    )
    ref = sorted({int(np.argmin(np.abs(xf - c))) for c in cheb})
    with mpmath.workdps(_DPS):
        for _ in range(iterations):
            # p(x_i) + (-1)**i E / w(x_i) = g(x_i) at the reference points.
            a = mpmath.matrix(n + 1, n + 1)
            b = mpmath.matrix(n + 1, 1)
            for row, i in enumerate(ref):
                for j in range(n):
                    a[row, j] = xs[i] ** j
                a[row, n] = mpmath.mpf((-1) ** row) / mpmath.mpf(w[i])
                b[row] = mpmath.mpf(g[i])
            sol = mpmath.lu_solve(a, b)
            coef = [sol[j] for j in range(n)]
            err = w * (g - np.polyval(np.array([float(c) for c in coef[::-1]]), xf))
            new = _alternating_extrema(err, n + 1)
            if new == ref:
                break
            ref = new
        return coef, abs(sol[n])


def _mp_poly(lowest_first, x):
    """sum c_j x**j by Horner's rule, in mpmath."""
    out = mpmath.mpf(0)
    for c in reversed(lowest_first):
        out = out * x + c
    return out


@functools.cache
def _samples_mp(fit: Fit, points: int):
    """The grid, target and weight of a float64 fit, all in mpmath."""
    with mpmath.workdps(_DPS):
        xs = _grid(fit.lo, fit.hi, points)
        return xs, [fit.target(x) for x in xs], [fit.weight(x) for x in xs]


def _remez_mp(fit: Fit, fixed, iterations, points: int = 1000):
    """`remez` for a float64 fit: the error scanned in mpmath."""
    xs, g, w = _samples_mp(fit, points)
    m = len(fixed)
    n = fit.degree + 1 - m
    with mpmath.workdps(_DPS):
        fixed_mp = [mpmath.mpf(float(c)) for c in fixed]
        g = [
            (gi - _mp_poly(fixed_mp, x)) / x**m if m else gi
            for gi, x in zip(g, xs, strict=True)
        ]
        w = [wi * abs(x) ** m for wi, x in zip(w, xs, strict=True)]
        lo, hi = mpmath.mpf(fit.lo), mpmath.mpf(fit.hi)
        cheb = [
            (lo + hi) / 2 - (hi - lo) / 2 * mpmath.cos(mpmath.pi * i / n)
            for i in range(n + 1)
        ]
        ref = sorted(
            {min(range(len(xs)), key=lambda k, c=c: abs(xs[k] - c)) for c in cheb}
        )
        for _ in range(iterations):
            a = mpmath.matrix(n + 1, n + 1)
            b = mpmath.matrix(n + 1, 1)
            for row, i in enumerate(ref):
                for j in range(n):
                    a[row, j] = xs[i] ** j
                a[row, n] = mpmath.mpf((-1) ** row) / w[i]
                b[row] = g[i]
            sol = mpmath.lu_solve(a, b)
            coef = [sol[j] for j in range(n)]
            err = [
                wi * (gi - _mp_poly(coef, x))
                for wi, gi, x in zip(w, g, xs, strict=True)
            ]
            new = _alternating_extrema(err, n + 1)
            if new == ref:
                break
            ref = new
        return coef, abs(sol[n])


def coefficients(fit: Fit) -> tuple:
    """The fit in its dtype, in the kernel's order (float32 or float64)."""
    if fit.dtype == np.float64:
        c64 = []
        for _ in range(fit.degree + 1):
            coef, _ = remez(fit, tuple(c64))
            c64.append(float(coef[0]))
        return tuple(c64[::-1] if fit.highest_first else c64)
    return float32_coefficients(fit)


def float32_coefficients(fit: Fit) -> tuple[np.float32, ...]:
    """The fit in float32, in `_math`'s order (the exact 1 of `_EXP_Q4`
    included).

    Rounding every minimax coefficient at once loses up to 5x the levelled
    error (log1p: 2**-27.58 against 2**-30.0); instead the lowest free
    coefficient is rounded and the others refitted, one at a time.
    """
    c32 = []
    for _ in range(fit.degree + 1):
        coef, _ = remez(fit, tuple(c32))
        c32.append(np.float32(float(coef[0])))
    if fit.name == "_EXP_Q4":
        c32 = [np.float32(1.0)] + c32  # exp(r) = 1 + r P(r)
    return tuple(c32[::-1] if fit.highest_first else c32)


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python maintainers/fit.py",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("names", nargs="*", help="constants to fit (default: all)")
    args = p.parse_args(argv)
    require("mpmath", "python maintainers/fit.py", p)
    known = {f.name for f in FITS} | {f"{f.module}.{f.name}" for f in FITS}
    unknown = set(args.names) - known
    if unknown:
        p.error(f"unknown constants {sorted(unknown)}; choose from "
                f"{sorted(known)}")  # fmt: skip
    for fit in FITS:
        full = f"{fit.module}.{fit.name}"
        if args.names and fit.name not in args.names and full not in args.names:
            continue
        _, level = remez(fit)
        print(f"# {fit.comment}; [{fit.lo:.6g}, {fit.hi:.6g}], degree "
              f"{fit.degree}, levelled error {float(level):.4g}")  # fmt: skip
        print(f"{fit.module}.{fit.name} = (")
        for c in coefficients(fit):
            print(f"    {float(c)!r},")
        print(")")


if __name__ == "__main__":
    main()
