"""Double words of float32 or float64: the bottom of the arithmetic layer.

A double word (hi, lo) holds hi + lo with lo far below an ulp of hi (or
unnormalized where a function says so). Error-free sums and products,
products and quotients of double words, a cheap reciprocal and Horner's
rule, for every evaluation above: the float32 and float64 kernels, the
float32 words of the TPU evaluations and the float64 words of the CPU and
GPU ones. Every error-free step is Dekker's or Knuth's, exact whether or
not the compiler contracts a multiply-add. Nothing of the library is
imported here.
"""

from __future__ import annotations

import numpy as np
from jax import lax

# Dekker's split: the high half keeps 12 of float32's 24 bits, 26 of
# float64's 53 (a mask of the low bits: no overflow).
_SPLIT = {
    np.dtype(np.float32): (np.int32, np.int32(-4096)),
    np.dtype(np.float64): (np.int64, np.int64(-(1 << 27))),
}
# 1 / m on [1, 2], relative error 2**-9.2 (interpolation at Chebyshev
# points), highest first; two Newton steps take it to 2**-36.7.
_RECIP = (-0.22183709, 1.33102253, -2.93934142, 2.82842288)


def horner(coeffs, v):
    """The polynomial with `coeffs` (highest first) at v, by Horner's rule,
    in v's dtype (a single coefficient gives an array of v's shape)."""
    out = lax.full_like(v, float(coeffs[0]))
    for c in coeffs[1:]:
        out = out * v + float(c)
    return out


def two_sum(a, b):
    """(s, e) with s = fl(a + b) and s + e = a + b exactly (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def fast_two_sum(a, b):
    """two_sum for |a| >= |b| (or a = 0): three operations (Dekker)."""
    s = a + b
    return s, b - (s - a)


def split(v):
    """v = hi + lo, hi with half of v's significand bits (Dekker)."""
    itype, mask = _SPLIT[np.dtype(v.dtype)]
    hi = lax.bitcast_convert_type(lax.bitcast_convert_type(v, itype) & mask, v.dtype)
    return hi, v - hi


def product_error(a, b, p):
    """The exact rounding error a b - p of p = fl(a b) (Dekker), for
    significands no split of which is subnormal. Every partial product is
    exact (float64's last one rounds at 2**-106 relative), so a contracted
    FMA changes nothing."""
    ah, al = split(a)
    bh, bl = split(b)
    return ((ah * bh - p) + ah * bl + al * bh) + al * bl


def two_prod(a, b):
    """(p, e) with p = fl(a b) and p + e = a b exactly (`product_error`).

    A square (b is a) is at risk: XLA:CPU compiled the double-double
    `mul(s, s)` with hi * hi recomputed in the fusion of the error, where
    LLVM contracted it into an FMA (the error of the exact product, not of
    p: 2**-54 relative; `_dd.log1p` avoids it)."""
    p = a * b
    return p, product_error(a, b, p)


def mul(x, f):
    """The double word x times the value f, to about a unit of x's low
    word."""
    hi, lo = x
    ph, pl = two_prod(hi, f)
    return ph, pl + lo * f


def mul2(x, y):
    """The double words x times y (either may be unnormalized: its low
    word need not be below an ulp of its high word)."""
    ph, pl = two_prod(x[0], y[0])
    return ph, pl + ((x[0] * y[1] + x[1] * y[0]) + x[1] * y[1])


def reciprocal(d):
    """1 / d for d in [1, 4), to 2**-36 relative, in cheap operations only.

    XLA will not duplicate an expensive producer (a division) into several
    consumers, so a division whose result is read twice splits the loop in
    several fusions with their intermediates in memory; a quotient's
    correction needs 1 / d only to half precision (its error enters
    squared). NaN stays NaN.
    """
    upper = d >= 2.0
    m = lax.select(upper, d * 0.5, d)
    y = horner(_RECIP, m)
    for _ in range(2):  # Newton: 2**-18.3, then 2**-36.7
        y = y * (2.0 - m * y)
    return lax.select(upper, y * 0.5, y)


def div(n, d):
    """The double words n / d, for d's high word in [1, 4): a Newton
    reciprocal, the quotient, and its exact remainder's correction."""
    nh, nl = n
    dh, dl = d
    y = reciprocal(dh)
    # nl need not be small against an ulp of nh (a sum's words are kept
    # unnormalized): the first quotient takes it, so that the remainder is
    # as small as y's error.
    q = (nh + nl) * y
    ph, pl = two_prod(q, dh)
    # nh - ph is exact: ph is within a few ulps of nh (Sterbenz).
    rem = (((nh - ph) - pl) + nl) - q * dl
    return fast_two_sum(q, rem * y)


def one(like):
    """1 in `like`'s dtype, behind a barrier: XLA folds `(v + 1) - 1` to v,
    which would erase an error-free sum's low word."""
    return lax.optimization_barrier(np.asarray(1, like.dtype))


def value(x):
    hi, lo = x
    return hi + lo
