"""Float32 expansions, for the few elements whose correct rounding
HIGHEST's float32 evaluation (`_highest32`, platforms without float64)
cannot decide: what `_dd` is to the float64 evaluation.

An expansion is an array of shape (WORDS, ...) whose value is the sum of
its words, largest first, each below an ulp of the one before; five words
carry about 2**-118 relative (measured against mpmath). Every step is
Knuth's sum or Dekker's product with a bit-mask split, exact whether or
not the compiler contracts a multiply-add, and nothing here calls the
platform's division, `exp` or `log`: the arithmetic relies on float32
addition and multiplication rounding to nearest, nothing more. The caller
keeps every value near 1 (exponents are carried apart), so that the words
a platform flushes below float32's normal range are below 2**-126 of the
value.

The code is written for compactness, not speed: the loops are XLA loops
(one traced body each), and `_highest32` calls it on a few elements.
"""

from __future__ import annotations

import math
from fractions import Fraction

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_softplus import _math, _words

WORDS = 5
# Passes of `renorm`'s distillation: six leave exp, quotients and products
# within 2**-118 (three, with the terms sorted first, did too, at three
# times the cost: XLA:CPU sorts slowly; four, unsorted, 2**-102).
PASSES = 6
_F32 = np.float32


def _vec_sum(t):
    """An error-free transformation of the terms t (m, ...), largest
    first: their sum from the smallest up, then each addition's error (an
    XLA loop: one traced step)."""

    def step(s, term):
        return _words.two_sum(term, s)

    s, errors = lax.scan(step, t[-1], t[-2::-1])
    return jnp.concatenate([s[None], errors[::-1]])


def renorm(t, words=WORDS):
    """The `words` largest terms of an expansion equal to the sum of the
    terms t (m, ...), whatever their cancellation: repeated error-free
    sums (Priest's distillation) leave the terms nonoverlapping, and what
    lies below the last word kept is dropped."""
    for _ in range(PASSES):
        t = _vec_sum(t)
    return t[:words]


def const(value, like):
    """The expansion of an exact rational `value`, shaped as `like`'s
    words, behind a barrier (XLA folds `(v + C) - C`)."""
    c = lax.optimization_barrier(np.asarray(_words_of(value), _F32))
    return c.reshape((WORDS,) + (1,) * (like.ndim - 1)) + jnp.zeros_like(like)


def _words_of(value):
    words, rest = [], Fraction(value)
    for _ in range(WORDS):
        w = float(np.float32(float(rest)))
        words.append(w)
        rest -= Fraction(w)
    return words


def scalar(v):
    """The expansion of a float32 array v."""
    return jnp.concatenate([v[None], jnp.zeros((WORDS - 1,) + v.shape, v.dtype)])


def add(a, b):
    return renorm(jnp.stack([a, b], 1).reshape((-1,) + a.shape[1:]))


def mul(a, b):
    """a b: the partial products of words i + j < WORDS exactly, the next
    diagonal rounded."""
    terms = []
    for n in range(WORDS + 1):
        for i in range(n + 1):
            if n < WORDS:
                terms.extend(_words.two_prod(a[i], b[n - i]))
            elif i < WORDS and n - i < WORDS:
                terms.append(a[i] * b[n - i])
    return renorm(jnp.stack(terms))


def mul_scalar(a, v):
    """a v for a float32 array v."""
    return renorm(
        jnp.stack([w for i in range(WORDS) for w in _words.two_prod(a[i], v)])
    )


def div(a, b):
    """a / b for b's first word in [1, 4): WORDS + 1 quotients, each of
    the exact remainder by b's first word times a Newton reciprocal of it
    (`_words.reciprocal`, float32's precision: the next remainder takes
    each quotient's error)."""
    inv = _words.reciprocal(b[0])

    def step(i, carry):
        rem, qs = carry
        q = rem[0] * inv
        terms = [rem] + [jnp.stack(_words.two_prod(-q, b[j])) for j in range(WORDS)]
        return renorm(jnp.concatenate(terms)), qs.at[i].set(q)

    # Of a's type (inside shard_map, varying as a does).
    qs = lax.full_like(a, 0, shape=(WORDS + 1,) + a.shape[1:])
    _, qs = lax.fori_loop(0, WORDS + 1, step, (a, qs))
    return renorm(qs)


def scale(a, k):
    """a 2**k for int32 k <= 0 (0 below float32's normal range: the caller
    keeps such a term far below the value it is added to)."""
    p = _math._pow2(lax.max(k, np.int32(-127)))
    return a * p[None]


def round_nearest(a, precision):
    """a rounded to `precision` significant bits (24, 11 or 8), to
    nearest even, as float32, for a normal value: a candidate from the
    first two words, then the signs of a minus the midpoints beside it."""
    c = a[0] + a[1]
    if precision < 24:
        c = lax.convert_element_type(
            lax.convert_element_type(c, _HALF[precision]), _F32
        )
    bits = lax.bitcast_convert_type(lax.abs(c), np.int32)
    expo = lax.shift_right_logical(bits, np.int32(23))  # biased
    ulp = _math._pow2(expo - np.int32(127 + precision - 1))
    # Below a power of two the spacing halves.
    low = lax.select(bits & np.int32(0x7FFFFF) == 0, 0.5 * ulp, ulp)
    sign = lax.select(c < 0, -jnp.ones_like(c), jnp.ones_like(c))
    up, down = sign * ulp, sign * low
    # a - (c + up/2) and a - (c - down/2), as the first word of each sum.
    above = renorm(jnp.concatenate([a, -c[None], -0.5 * up[None]]))[0]
    below = renorm(jnp.concatenate([a, -c[None], 0.5 * down[None]]))[0]
    even = (lax.bitcast_convert_type(c, np.int32) >> (24 - precision)) & 1 == 0
    out = lax.select(
        sign * above > 0, c + up, lax.select(sign * below < 0, c - down, c)
    )
    # An exact midpoint (never met: the callers' values are irrational)
    # goes to the even neighbour.
    out = lax.select((above == 0) & ~even, c + up, out)
    return lax.select((below == 0) & ~even, c - down, out)


_HALF = {11: np.float16, 8: np.dtype("bfloat16")}


# ln 2 to 2**-125 in words of 15 significant bits: k ln 2 is exact word by
# word for |k| < 2**9.
_LN2 = Fraction(
    "0.69314718055994530941723212145817656807550013436025525412068000949339362196969"
)


def _fifteen_bit_words(x, count):
    words, rest = [], Fraction(x)
    for _ in range(count):
        e = math.floor(math.log2(abs(rest)))
        w = Fraction(round(rest * 2 ** (14 - e)), 2 ** (14 - e))
        words.append(float(w))
        rest -= w
    return words


LN2_WORDS = _fifteen_bit_words(_LN2, 8)


# 1 / n! for n = 1 .. 13, rows of words.
_INVERSE_FACTORIALS = np.asarray(
    [_words_of(Fraction(1, math.factorial(n))) for n in range(1, 14)], _F32
)


def exp(x):
    """(k, m) with e**x = 2**k m, m an expansion in [0.7, 1.42], for an
    expansion x in [-210, 210] (k int32).

    x = k ln 2 + r (ln 2 in words of 15 bits, each k ln 2 word exact),
    then expm1(r / 64) from its series (13 terms), squared back six times
    as m -> 2 m + m**2."""
    kf = lax.round(x[0] * _F32(1.4426950408889634), lax.RoundingMethod.TO_NEAREST_EVEN)
    ln2 = lax.optimization_barrier(np.asarray(LN2_WORDS, _F32))
    parts = [x] + [(-kf * ln2[i])[None] for i in range(len(LN2_WORDS))]
    r = renorm(jnp.concatenate(parts)) * _F32(1 / 64)
    coeffs = lax.optimization_barrier(_INVERSE_FACTORIALS)

    def term(i, m):  # Horner from 1/13! down to 1/1!
        c = coeffs[12 - i].reshape((WORDS,) + (1,) * (x.ndim - 1)) + jnp.zeros_like(x)
        return add(mul(m, r), c)

    m = lax.fori_loop(0, 13, term, jnp.zeros_like(x))
    m = mul(m, r)  # expm1(r / 64)
    m = lax.fori_loop(0, 6, lambda _, m: add(2 * m, mul(m, m)), m)
    one = const(1, x)
    return kf.astype(np.int32), add(one, m)
