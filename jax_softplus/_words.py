"""Double words of float32 or float64: the bottom of the arithmetic layer.

A double word (hi, lo) holds hi + lo with lo far below an ulp of hi (or
unnormalized where a function says so). Error-free products, products,
quotients and the exact error of a rounded product, for the float32 words
of the TPU evaluations and the float64 words of the CPU and GPU ones; they
import nothing of the library above `_math` and `_math64`.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_softplus import _math, _math64


def two_prod(a, b):
    """(p, e) with p = fl(a b) and p + e = a b exactly (Dekker), for
    significands (no split may overflow)."""
    if a.dtype == np.float64:
        return _math64.two_prod(a, b)
    p = a * b
    return p, _math._product_error(a, b, p)


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


def div(n, d):
    """The double words n / d, for d's high word in [1, 4): a Newton
    reciprocal (`_math64._reciprocal`, cheap operations only), the
    quotient, and its exact remainder's correction."""
    nh, nl = n
    dh, dl = d
    y = _math64._reciprocal(dh)
    # nl need not be small against an ulp of nh (a sum's words are kept
    # unnormalized): the first quotient takes it, so that the remainder is
    # as small as y's error.
    q = (nh + nl) * y
    ph, pl = two_prod(q, dh)
    # nh - ph is exact: ph is within a few ulps of nh (Sterbenz).
    rem = (((nh - ph) - pl) + nl) - q * dl
    return _math64.fast_two_sum(q, rem * y)


def one(like):
    """1 in `like`'s dtype, behind a barrier: XLA folds `(v + 1) - 1` to v,
    which would erase an error-free sum's low word (`_math64._opaque`)."""
    return lax.optimization_barrier(np.asarray(1, like.dtype))


def value(x):
    hi, lo = x
    return hi + lo


def product_error(src, beta, t):
    """The exact rounding error beta src - t of t = fl(beta src), the
    factors rebalanced by a power of two first, so that no partial product
    of the split is subnormal (a beta of 1e35 times a src of 1e-35)."""
    beta = beta * jnp.ones_like(src)
    if t.dtype == np.float64:
        b, x, _, _ = _math64._balance(beta, src)
        return _math64.two_prod(b, x)[1]
    b, x, _ = _math._balance(beta, src)
    return _math._product_error(b, x, t)
