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
    """a + b for double words (Shewchuk's accurate sum, about 2**-104)."""
    s, e = _words.two_sum(a[0], b[0])
    t, f = _words.two_sum(a[1], b[1])
    e = e + t
    s, e = _words.fast_two_sum(s, e)
    e = e + f
    return _words.fast_two_sum(s, e)


def mul(a, b):
    """a b for double words."""
    p, e = _words.two_prod(a[0], b[0])
    e = e + (a[0] * b[1] + a[1] * b[0])
    return _words.fast_two_sum(p, e)


def div(a, b):
    """a / b for double words: two float64 quotients, each of the exact
    remainder."""
    q1 = a[0] / b[0]
    r = add(a, neg(mul((q1, lax.full_like(q1, 0)), b)))
    q2 = r[0] / b[0]
    r = add(r, neg(mul((q2, lax.full_like(q2, 0)), b)))
    q3 = r[0] / b[0]
    s, e = _words.fast_two_sum(q1, q2)
    return add((s, e), (q3, lax.full_like(q3, 0)))


def neg(a):
    return -a[0], -a[1]


def scale(a, k):
    """a 2**k for an int64 k that keeps both words normal."""
    p = _math.exp2_int(k, _F64)
    return a[0] * p, a[1] * p


def exp(x):
    """e**x for a double word x in [-700, 700], to about 2**-100 relative
    down to e**x = 2**-969 (x = -671), below which its low word is
    subnormal (and flushed on a CPU). `_highest` takes x in [-200, 60].

    x = k ln 2 + r with |r| <= ln 2 / 2 (ln 2 in three parts), then
    expm1(r / 16) from its series (14 terms: 0.022**15 / 15! < 2**-110),
    doubled back four times as m -> 2 m + m**2, which loses 4 bits at most.
    """
    kf = lax.round(x[0] * _INV_LN2, lax.RoundingMethod.TO_NEAREST_EVEN)
    r = add(x, neg(_words.two_prod(kf, _math64._opaque(_LN2[0]))))
    r = add(r, neg(_words.two_prod(kf, _math64._opaque(_LN2[1]))))
    r = add(r, (-kf * _LN2[2], lax.full_like(kf, 0)))
    r = (r[0] * 0.0625, r[1] * 0.0625)
    m = (lax.full_like(kf, _INVERSE_FACTORIALS[14][0]), lax.full_like(kf, 0))

    # Loops, not unrolled code: the same operations, a tenth of the program
    # (this runs on a few elements per call, its compile time on every one).
    def term(i, m):
        hi, lo = (lax.dynamic_index_in_dim(w, i, keepdims=False) for w in _SERIES)
        return add(mul(m, r), (lax.full_like(kf, 1) * hi, lax.full_like(kf, 1) * lo))

    m = lax.fori_loop(0, 13, term, m)
    m = mul(m, r)  # expm1(r / 16)
    for _ in range(4):
        m = add((2 * m[0], 2 * m[1]), mul(m, m))
    one = (_math64._opaque(1.0) * lax.full_like(kf, 1), lax.full_like(kf, 0))
    return scale(add(one, m), kf)


def _double_word(exact):
    hi = float(exact)
    return hi, float(exact - Fraction(hi))


# 1 / n! as double words, for exp's series.
_INVERSE_FACTORIALS = {
    n: _double_word(Fraction(1, math.factorial(n))) for n in range(1, 15)
}
# Their words for n = 13 down to 1, in the order the series takes them.
_SERIES = tuple(
    np.array([_INVERSE_FACTORIALS[n][w] for n in range(13, 0, -1)], _F64)
    for w in (0, 1)
)


def log1p(x):
    """log(1 + x) for a double word x in [0, 1], by two Newton steps on
    exp from float64's log1p: y -> y + (1 + x) e**-y - 1."""
    y = (lax.log1p(x[0]), lax.full_like(x[0], 0))
    one = (_math64._opaque(1.0) * lax.full_like(x[0], 1), lax.full_like(x[0], 0))

    def newton(_, y):
        return add(y, add(mul(add(one, x), exp(neg(y))), neg(one)))

    return lax.fori_loop(0, 2, newton, y)
