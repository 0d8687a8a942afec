"""Correctly rounded values where the platform has float64 (CPUs, GPUs):
`accuracy=lax.AccuracyMode.HIGHEST` for float32, bfloat16 and float16 data
(`_highest32` is the float32 arithmetic of platforms without float64).

1. **float64.** t = beta * src is exact in float64 (two 24-bit
   significands); exp(-|t|) comes from `_math64`'s Cody-Waite reduction and
   polynomial, and the result, rounded a few times in float64, is within
   `ERROR` of the exact value (the sum of those roundings' bounds).
2. **The rounding test and its loop** (`_rounding`): where the bound leaves
   the rounding in doubt (about 1 in 2**25 float32 elements, 1 in 2**41
   bfloat16 ones), the element is evaluated again in double-double (`_dd`,
   about 2**-100) and rounded once.

A division's result is taken through an opaque `- 0` before its several
consumers, so that XLA fuses it (it does not duplicate an expensive
operation into several consumers).
"""

from __future__ import annotations

import numpy as np
from jax import lax

from jax_softplus import _dd, _math, _math64, _rounding, _words

_F64 = np.float64
_BF16 = np.dtype("bfloat16")
# The float64 evaluations' error bounds, relative to the result. Backward:
# the reduced argument's rounding (2**-55 absolute), p's (2**-54.3), the
# denominator's two (2**-53 each) and the division's (2**-53), 2**-51.1 in
# all. Forward: the exponential's (2**-54), log1p's (f - f**2/2, 2**-53,
# and its tail), the division by beta and the sum with x (2**-53 each),
# about 2**-50.8. Each bound leaves room for the rounding of v (1 +- ERROR)
# itself (2**-53).
ERROR = {"backward": 2.0**-50, "forward": 2.0**-49}
# Clamps of -t: below -60, exp(-t) < 2**-86 and the backward's result is
# diff_dst to far below rounding; above 200 (for both ops), every result
# is far below the normal range (diff_dst exp(-200) < 2**-160, and
# exp(-200) / beta < 2**-162 for every normal float32 beta).
_ZLOW, _ZHIGH = -60.0, 200.0


def _fused(v):
    """v (a quotient) through an opaque `- 0`: the division then has one
    consumer, and XLA fuses it with the rest of the loop. (`- 0`, not
    `+ 0`, which would turn -0.0 into +0.0.)"""
    return v - _math64._opaque(0.0)


def _exp_neg(a):
    """exp(-a) = 2**k (1 + p) for float64 a in [-60, 200]: (2**k, p), p in
    [-0.30, 0.42] within 2**-54.3 absolute."""
    k, _, p, _ = _math64._exp_reduce(lax.neg(a))
    return _math.exp2_int(k, _F64), p


def backward_value(src, dd, beta):
    """dd * sigmoid(beta * src) in float64, within ERROR["backward"], for
    float32, bfloat16 or float16 operands (beta float32)."""
    x, d, b = (lax.convert_element_type(v, _F64) for v in (src, dd, beta))
    t = b * x  # exact
    scale, p = _exp_neg(lax.clamp(-_ZHIGH, t, -_ZLOW))
    # 1 + exp(-t) = (1 + 2**k) + 2**k p: 1 + 2**k exact for |k| <= 52, and
    # within 2**-53 otherwise.
    q = _fused(d / ((_math64._opaque(1.0) + scale) + scale * p))
    # Where sigmoid is exactly 0 (src = -inf sign(beta)) the result is dd * 0
    # (NaN for an infinite dd).
    return lax.select(_math.sigmoid_is_zero(x, b), d * 0.0, q)


def softplus_value(x, beta):
    """(1/beta) log(1 + exp(beta x)) in float64, within ERROR["forward"],
    for float32, bfloat16 or float16 x (beta float32).

    [t > 0] x + log1p(e) / beta, e = exp(-|t|); log1p(e) in fdlibm's form
    f - f**2/2 + s (f**2/2 + R(s**2)), s = f / (2 + f), from f = e (e below
    1/2) or (e - 1) / 2 (exact, plus ln 2), which rounds once beyond its
    polynomial; below e = 2**-60, log1p(e) = e to 2**-61.
    """
    # A Python-float beta in a user's jit is a constant, and XLA would turn
    # the division by it into a multiplication by its rounded reciprocal.
    beta = lax.optimization_barrier(beta)
    xs, b = lax.convert_element_type(x, _F64), lax.convert_element_type(beta, _F64)
    t = b * xs  # exact
    scale, p = _exp_neg(lax.min(lax.abs(t), lax.full_like(t, _ZHIGH)))
    e = scale + scale * p
    big = e >= 0.5
    f = lax.select(big, (e - 1.0) * 0.5, e)
    s = _fused(f / (f + 2.0))
    z = s * s
    hfsq = 0.5 * f * f
    log = (f - hfsq) + s * (hfsq + z * _words.horner(_math64._LOG1P_R, z))
    log = lax.select(big, log + 0.6931471805599453, log)
    log = lax.select(scale < 2.0**-60, e, log)
    q = _fused(log / b)
    out = lax.select(t > 0, xs + q, q)
    # beta = +-0 (traced, or subnormal): ln 2 / beta, +-inf by the zero's
    # sign, and NaN for an infinite or NaN x (0 x), as the default kernel.
    return lax.select(b == 0, (xs * 0.0 + np.log(2.0)) / b, out)


# The elements in doubt, one at a time, in double-double ---------------------


def _dd_backward(s, d, b):
    """dd * sigmoid(beta * src) for one element, as a double word."""
    s, d, b = (lax.convert_element_type(v, _F64) for v in (s, d, b))
    t = lax.clamp(-_ZHIGH, b * s, -_ZLOW)
    zero = lax.full_like(t, 0)
    # 1 behind a barrier: XLA folds (1 + e) - 1 to e.
    one = (_math64._opaque(1.0) * lax.full_like(t, 1.0), zero)
    return _dd.div((d, zero), _dd.add(one, _dd.exp(-t)))


def _dd_softplus(x, b):
    """(1/beta) log(1 + exp(beta x)) for one element, as a double word."""
    x, b = (lax.convert_element_type(v, _F64) for v in (x, b))
    t = b * x
    a = lax.min(lax.abs(t), lax.full_like(t, _ZHIGH))
    zero = lax.full_like(t, 0)
    q = _dd.div(_dd.log1p(_dd.exp(-a)), (b, zero))
    s = _dd.add((x, zero), q)  # x and q of one sign where t > 0
    pos = t > 0
    return lax.select(pos, s[0], q[0]), lax.select(pos, s[1], q[1])


def exact_backward(s, d, b):
    """dd * sigmoid(beta * src) for the elements in doubt, correctly rounded
    to their dtype."""
    return _rounding.round_pair(*_dd_backward(s, d, b), s.dtype)


def exact_softplus(x, b):
    """softplus for the elements in doubt, correctly rounded to x's dtype."""
    return _rounding.round_pair(*_dd_softplus(x, b), x.dtype)


def _approx(value, error, dtype):
    """The rounding test (`_rounding.rounded`) of the float64 `value`."""

    def approx(*operands, wide=False):
        v = value(*operands)
        return _rounding.rounded(v, error * (4 if wide else 1), dtype)

    return approx


# The size from which results take two passes (`_rounding`), in bytes of
# the result, for every dtype (2**23 float32 elements, 2**24 bfloat16 or
# float16 ones): one pass reads the operands after writing the result, so
# a donated call writes it into a temporary of that size and copies it;
# two passes write over the donated operand, with the bitmap of
# temporaries (docs/inplace.md). Two passes evaluate twice, which the half
# types pay for with speed, float32 less (its donated calls gain more):
# benchmarks/results/zen4-2026-12-07b/two-passes.md.
_TWO_PASSES = 32 << 20


def two_passes(v):
    """Whether the lowering evaluates `v` (an operand, or its aval) in two
    passes."""
    return v.size * np.dtype(v.dtype).itemsize >= _TWO_PASSES


def backward(src, dd, beta, *, inplace=False):
    """dd * sigmoid(beta * src), correctly rounded to the data dtype (a
    float32 beta); with `inplace`, or from `_TWO_PASSES` bytes on, in two
    passes, which XLA can write over a donated dd."""
    approx = _approx(backward_value, ERROR["backward"], src.dtype)
    return _rounding.correctly_rounded(
        (src, dd, beta),
        1,
        approx,
        exact_backward,
        two_passes=inplace or two_passes(dd),
    )


def softplus(x, beta):
    """(1/beta) log(1 + exp(beta x)), correctly rounded to the data dtype (a
    float32 beta): from `_TWO_PASSES` bytes on in two passes, which XLA
    can write over a donated x."""
    approx = _approx(softplus_value, ERROR["forward"], x.dtype)
    return _rounding.correctly_rounded(
        (x, beta), 0, approx, exact_softplus, two_passes=two_passes(x)
    )
