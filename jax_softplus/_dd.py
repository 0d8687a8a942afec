"""Double-double arithmetic in float64, for the few elements whose correct
rounding the float64 evaluation cannot decide (`_highest`).

A value is a pair (hi, lo) of float64 with hi = fl(hi + lo); the
operations keep about 104 bits. They are written for clarity, not speed:
`_highest` calls them on one element at a time, rarely. Every error-free
step is Dekker's or Knuth's (exact whether or not the compiler contracts a
multiply-add), and constants enter behind a barrier (`_math64._opaque`),
since XLA folds `(v + C) - C` to v.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from jax import lax

from jax_softplus import _math, _math64, _words

_F64 = np.float64
# ln 2 in three parts: _LN2[0] has 32 significant bits (k _LN2[0] is exact
# for |k| < 2**21), _LN2[1] 53 more (fdlibm's split), _LN2[2] the rest to
# 2**-130.
_LN2 = (6.93147180369123816490e-01, 1.90821492927058770002e-10, 1.1612227229362532e-26)
_INV_LN2 = 1.4426950408889634


def add(a, b):
    """a + b for double words that do not cancel (|a + b| at least a third
    of |a| + |b|, as every sum here: the series' terms and 1 + e, 2 + x
    and x + log1p(e) / beta of one sign), to about 2**-104 relative."""
    s, e = _words.two_sum(a[0], b[0])
    return _words.fast_two_sum(s, e + (a[1] + b[1]))


def mul(a, b):
    """a b for double words."""
    p, e = _words.two_prod(a[0], b[0])
    e = e + (a[0] * b[1] + a[1] * b[0])
    return _words.fast_two_sum(p, e)


def div(a, b):
    """a / b for double words, to about 2**-102 relative: a quotient q from
    one reciprocal of b's high word, then the exact remainder a - q b
    over b (a single division: XLA keeps each one a kernel of its own)."""
    y = 1.0 / b[0]
    q = a[0] * y
    p, pe = _words.two_prod(q, b[0])
    # a - p is exact: p is within a few ulps of a (Sterbenz).
    r = (((a[0] - p) - pe) + a[1]) - q * b[1]
    return _words.fast_two_sum(q, r * y)


def scale(a, k):
    """a 2**k for an int64 k that keeps both words normal."""
    p = _math.exp2_int(k, _F64)
    return a[0] * p, a[1] * p


def _series(table, v):
    """The polynomial with the double-word coefficients `table` (highest
    first) at the double word v, by Horner's rule in a loop: the same
    operations as unrolled code, a fraction of the program (this runs on a
    few elements per call, its compile time on every one). Each coefficient
    is read from the table in the loop, where XLA cannot fold it."""
    ones = lax.full_like(v[0], 1)
    m = (ones * table[0][0], ones * table[1][0])

    def term(i, m):
        hi, lo = (lax.dynamic_index_in_dim(w, i, keepdims=False) for w in table)
        return add(mul(m, v), (ones * hi, ones * lo))

    return lax.fori_loop(1, table[0].size, term, m)


def _table(values):
    """Exact rationals as a table of double words (high words, low words)."""
    words = []
    for exact in values:
        hi = float(exact)
        words.append((hi, float(exact - Fraction(hi))))
    return tuple(np.array(w, _F64) for w in zip(*words, strict=True))


# 1 / n! for n = 22 down to 0: exp(r) for |r| <= ln 2 / 2 to 2**-109
# (0.35**23 / 23!).
_EXP_SERIES = _table(Fraction(1, math.factorial(n)) for n in range(22, -1, -1))
# atanh(s) / s = sum s**2k / (2k + 1) for k = 32 down to 0, as a series in s
# (each 1 / (2k + 1) after a 0): to 2**-110 for s <= 1/3 ((1/9)**33 / 67).
_ATANH_SERIES = _table(Fraction(n % 2, n) for n in range(65, 0, -1))


def exp(x):
    """e**x for a float64 x in [-700, 700], as a double word, to about
    2**-104 relative down to e**x = 2**-969 (x = -671), below which its low
    word is subnormal (and flushed on a CPU). `_highest` takes x in [-200,
    60].

    x = k ln 2 + r with |r| <= ln 2 / 2 (ln 2 in three parts), then exp(r)
    from its series (`_EXP_SERIES`).
    """
    kf = lax.round(x * _INV_LN2, lax.RoundingMethod.TO_NEAREST_EVEN)
    # k _LN2[0] is exact, and so is x - k _LN2[0]: k _LN2[0] is within a
    # factor 2 of x where k is not 0 (Sterbenz).
    r = x - kf * _math64._opaque(_LN2[0])
    p, pe = _words.two_prod(kf, _math64._opaque(_LN2[1]))
    r, e = _words.two_sum(r, -p)
    r = _words.fast_two_sum(r, (e - pe) - kf * _LN2[2])
    return scale(_series(_EXP_SERIES, r), kf)


def log1p(x):
    """log(1 + x) for a double word x in [0, 1], to about 2**-103 relative:
    2 atanh(s) with s = x / (2 + x) in [0, 1/3], from its series
    (`_ATANH_SERIES`)."""
    two = (_math64._opaque(2.0) * lax.full_like(x[0], 1), lax.full_like(x[0], 0))
    s = div(x, add(two, x))
    # A series in s, its even coefficients 0, not one in s**2: XLA:CPU
    # recomputed the square's hi * hi in the fusion of its error, where LLVM
    # contracted it into an FMA (the error of the exact product, not of the
    # rounded one: 2**-54).
    p = mul(s, _series(_ATANH_SERIES, s))
    return 2 * p[0], 2 * p[1]
