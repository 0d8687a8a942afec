"""Derivatives of every order, each evaluated directly with a rule of its own.

Every derivative of `softplus_backward` (dd * s(beta * src), s the sigmoid)
and of `softplus` in any of their arguments is a sum of two families:

* `combination(terms, ...)` = dd * sum c src**i beta**j s^(n)(t) over
  static terms (c, n, i, j), t = beta * src (`sigmoid_derivative` is one
  term). Its derivatives are combinations again (d/dsrc [n, i, j] =
  i [n, i-1, j] + [n+1, i, j+1], d/dbeta [n, i, j] = j [n, i, j-1] +
  [n+1, i+1, j]), so a JVP rule written in the family is closed under
  differentiation, forward or reverse, to any order.
* `dsoftplus_dbeta(k, ...)` = d^k softplus / d beta^k, from
  beta D_k + k D_(k-1) = x**k s^(k-1)(t) (differentiate beta softplus =
  log(1 + e^t) k times): a combination plus a multiple of D_1, which has
  its own cancellation-free form; d/dx D_k is x**k s^(k)(t), d/dbeta D_k
  is D_(k+1).

So JAX never differentiates the inside of an evaluation (its exponent
bookkeeping, the kernels' branches, the rearrangements that avoid
cancellation): it differentiates these rules, and each term it builds is one
of the two families evaluated from primal values, times a tangent.

Each value is evaluated in the compute dtype (beta's: float32 for
bfloat16/float16 data) with its power-of-two exponent carried apart from
its significand: the factors' significands enter the kernel lifted by a
power of two chosen from t, so that the kernel's result is normal wherever
the exact one is; each term is kept as (significand, exponent) and the
terms are summed aligned to the largest exponent, the exponent applied at
the end (XLA:CPU flushes subnormals, so a term may not pass through one).
Nothing overflows or flushes early, whatever the order of the factors'
sizes (a diff_dst of 3e38 times a tiny slope, a beta of 1e-5 whose x**4 is
huge).
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.custom_derivatives import SymbolicZero
from jax.interpreters import ad

from jax_softplus import _kernels, _math, _math64, _wide
from jax_softplus._primitive import bind

_LOG2E = 1.4426950408889634
# The largest lift: the lifted significand (below 4) stays finite.
_LIFT_MAX = {np.dtype(np.float32): 124, np.dtype(np.float64): 1020}
# Beyond the one-step lift's reach: 2**124 e^-a is normal up to a = 172
# (2**1020 e^-a up to 1415 in float64).
_FAR = {np.dtype(np.float32): 170.0, np.dtype(np.float64): 1400.0}
# Where log1p(e^-a) = s(-a) to below half an ulp (relative error e^-a / 2):
# above a = 17 in float32, 38 in float64.
_DBETA_SWITCH = {np.dtype(np.float32): 17.0, np.dtype(np.float64): 38.0}


@functools.cache
def _slope_polynomial(n):
    """s^(n) = w * (A(w) + tau * B(w)) for n >= 1, w = s(t) s(-t) = s'(t),
    tau = tanh(t / 2); returns the coefficients of A and B, lowest first.

    From s'' = -w tau and d tau / dt = 2 w: for p = sum c w**a tau**b,
    p_(n+1) = -tau p - w tau dp/dw + 2 w dp/dtau, reduced by
    tau**2 = 1 - 4 w. A zero of A + tau B is a zero of s^(n) itself, so its
    evaluation cancels only where the derivative does.
    """
    p = {(0, 0): 1}
    for _ in range(n - 1):
        q = {}
        for (a, b), c in p.items():
            for key, value in (((a, b + 1), -c * (1 + a)), ((a + 1, b - 1), 2 * b * c)):
                if value:
                    q[key] = q.get(key, 0) + value
        p = {}
        for (a, b), c in q.items():
            if b == 2:  # tau**2 = 1 - 4 w (b is at most 2 here)
                b = 0
                p[(a + 1, 0)] = p.get((a + 1, 0), 0) - 4 * c
            p[(a, b)] = p.get((a, b), 0) + c
    degree = max(a for a, _ in p) + 1
    return tuple(tuple(p.get((a, b), 0) for a in range(degree)) for b in (0, 1))


def _bernoulli(count):
    """B_0 .. B_(count-1), exactly (Akiyama-Tanigawa)."""
    out, row = [], []
    for m in range(count):
        row.append(Fraction(1, m + 1))
        for j in range(m, 0, -1):
            row[j - 1] = j * (row[j - 1] - row[j])
        out.append(row[0])
    return out


@functools.cache
def _tanh_series(terms):
    """Coefficients of tanh(y) = sum c_n y**(2n-1), n = 1..terms."""
    b = _bernoulli(2 * terms + 1)
    return tuple(
        float(2 ** (2 * n) * (2 ** (2 * n) - 1) * b[2 * n] / math.factorial(2 * n))
        for n in range(1, terms + 1)
    )


# Below |t| = 1.4 tanh(t/2) from its series, to well below an ulp: XLA's
# tanh and expm1 reach 3.8 and 4.8 ulp in float32 there (and tanh 6 ulp in
# float64 near |t| = 37). At y = t/2 = 0.7 each term is 0.2 of the one
# before: 12 terms leave 2**-28, 30 leave 2**-70. The coefficients are
# computed on first use, not at import.
_TANH_TERMS = {np.dtype(np.float32): 12, np.dtype(np.float64): 30}


def _product_error(src, beta, t):
    """The exact rounding error beta src - t of t = fl(beta src)."""
    if t.dtype == np.float64:
        return _math64.two_prod(beta * jnp.ones_like(src), src)[1]
    return _math._product_error(beta * jnp.ones_like(src), src, t)


def _tanh_half(hints, src, beta, t, a, w):
    """tanh(t / 2) of the exact t = beta src, a = |t|, w = s(t) s(-t):
    below a = 1.4 its series y + y**3 Q(y**2), y = t / 2 (only the smaller
    term rounds), at the rounded t and corrected by the product's error
    (d tanh(t/2) / dt = 2 w); above, 1 - 2 s(-a) from one bind (the kernel
    takes the product exactly), whose subtraction cancels less than a third
    of a bit. Within about 0.75 ulp in float64."""
    y = t * 0.5
    y2 = y * y
    coeffs = _tanh_series(_TANH_TERMS[np.dtype(t.dtype)])  # the first is 1
    series = y + (
        (y * y2) * _horner(coeffs[1:], y2) + 2 * w * _product_error(src, beta, t)
    )
    far = jnp.where(a < 1.4, jnp.zeros_like(src), -lax.abs(src))
    tail = bind(far, jnp.ones_like(src), lax.abs(beta), hints)
    closed = jnp.sign(t) * (1 - 2 * tail)
    return jnp.where(a < 1.4, series, closed)


def _frexp(v):
    m, e = jnp.frexp(v)
    return m, e.astype(np.int32)


def _horner(coeffs, w):
    out = jnp.full_like(w, coeffs[-1])
    for c in coeffs[-2::-1]:
        out = out * w + c
    return out


def _power(m, k):
    out = None
    for _ in range(abs(k)):
        out = m if out is None else out * m
    if out is None:
        return None
    return out if k > 0 else lax.reciprocal(out)


# A combination is a static tuple of terms (c, n, i, j), its value
# dd * sum c src**i beta**j s^(n)(t). Each term is evaluated as a pair
# (v, k), v of size near 1 and k an int32 exponent; the pairs are summed
# aligned to the largest exponent, so no term flushes to zero (XLA:CPU
# flushes subnormals) or overflows where the sum is normal.


def _parts(terms, hints, src, beta, dd=None, factor=None):
    """The (v, k) pairs of a combination's terms, in beta's dtype."""
    cdt = beta.dtype
    src = src.astype(cdt)
    # A power of src multiplies only a slope term (n >= 1), which is 0 at an
    # infinite src (`_slope_base`): its significand there is that of 0, not
    # inf (inf * 0 would be NaN).
    ms, es = _frexp(jnp.where(jnp.isinf(src), jnp.zeros_like(src), src))
    mb, eb = _frexp(beta)
    md, ed = (None, 0) if dd is None else _frexp(dd.astype(cdt))
    if factor is not None:
        md = factor if md is None else md * factor
    md = jnp.ones_like(src) if md is None else md * jnp.ones_like(src)
    t = beta * src
    a = lax.abs(t)
    # The lift that puts the kernel's result near 1: -log2 of s(t) (n = 0)
    # or of s'(t) (n >= 1), roughly; capped so the lifted value is finite.
    bases = {}
    if any(n == 0 for _, n, _, _ in terms):
        # s(t): one bind, lifted by -log2 s(t) (e^-a at t = -a).
        lift = _lift(jnp.maximum(-t, 0), cdt)
        y = bind(src, md * _math.exp2_int(lift, cdt), beta, hints)
        bases[0] = _normalized(y, ed - lift)
    if any(n >= 1 for _, n, _, _ in terms):
        bases[1] = _slope_base(hints, src, beta, md, ed, a)
    w = tau = None
    parts = []
    for c, n, i, j in terms:
        y, k = bases[min(n, 1)]
        factors = [f for f in (_power(ms, i), _power(mb, j)) if f is not None]
        v = functools.reduce(lax.mul, factors, y)
        if n >= 2:
            even, odd = _slope_polynomial(n)
            if w is None:
                e = jnp.exp(-a)
                w = e / jnp.square(1 + e)
                tau = _tanh_half(hints, src, beta, t, a, w)
            poly = _horner(even, w) if any(even) else jnp.zeros_like(w)
            if any(odd):
                poly = poly + tau * _horner(odd, w)
            v = v * poly
        parts.append((v * c if c != 1 else v, k + es * i + eb * j))
    return parts


def _lift(nats, dtype):
    """ceil(nats / ln 2), capped so that a lifted value below 4 is finite."""
    lift = jnp.clip(jnp.ceil(nats * _LOG2E), 0, _LIFT_MAX[np.dtype(dtype)])
    return jnp.where(jnp.isnan(lift), 0, lift).astype(np.int32)


def _slope_base(hints, src, beta, md, ed, a):
    """(v, k) with v 2**k = md 2**ed s(t) s(-t): two binds, the first
    lifted by -log2 of the result, so that it is normal wherever the exact
    value is. For |t| above 17 (37 in float64) one of the two factors is 1
    exactly: one rounding.

    Beyond the lift's reach (a = |t| above 170, 1400 in float64),
    s(t) s(-t) = e^-a to within e^-a and is computed as
    s(-a/2) s(-a/2) = e^-a (1 + O(e^-a/2)), lifted before each bind: normal
    up to a = 346 (2830 in float64). The operands are selected, not the
    results: two binds either way, beta unchanged.
    """
    cdt = beta.dtype
    far = a > _FAR[np.dtype(cdt)]
    half = lax.neg(jnp.sign(beta)) * lax.abs(src) * 0.5  # beta * half = -a/2
    lift1 = jnp.where(far, _lift(a * 0.5, cdt), _lift(a, cdt))
    lift2 = jnp.where(far, lift1, 0)
    y = bind(
        jnp.where(far, half, lax.neg(src)), md * _math.exp2_int(lift1, cdt), beta, hints
    )
    y = bind(jnp.where(far, half, src), y * _math.exp2_int(lift2, cdt), beta, hints)
    # src**i s^(n)(beta src) -> 0 as src -> +-inf, for n >= 1 (beta != 0;
    # for beta = 0, t = 0 * inf is NaN and stays so).
    y = jnp.where(jnp.isinf(src) & (beta != 0), jnp.zeros_like(y) * md, y)
    return _normalized(y, ed - lift1 - lift2)


def _normalized(y, k):
    """(m, k + e) with y = m 2**e, m in [1/2, 1): beyond the lift's cap y
    is far below 1, and the aligned sum must not shift it out of range."""
    m, e = _frexp(y)
    return m, k + e


def _aligned_pair(parts):
    """(m, top) with sum v * 2**k = m 2**top: each term scaled to the
    largest k (of the terms that are not zero) before the sum."""
    floor = np.int32(-(2**20))
    top = functools.reduce(jnp.maximum, [jnp.where(v == 0, floor, k) for v, k in parts])
    total = functools.reduce(lax.add, [_math.times_pow2(v, k - top) for v, k in parts])
    return total, top


def _aligned_sum(parts):
    """sum v * 2**k, aligned to the largest exponent (`_aligned_pair`)."""
    return _math.times_pow2(*_aligned_pair(parts))


def _evaluate(wide, narrow, src, beta, *rest):
    """`wide(src, beta, *rest)` on a CPU for float32 compute (in float64,
    `_wide`), else `narrow(...)` (in the compute dtype, exponents carried
    apart). The platform is picked when XLA lowers the computation, with no
    run-time branch. A subnormal beta is 0, as the public boundary makes a
    concrete one and as the CPU's arithmetic reads it (the exponent
    bookkeeping would read its bits)."""
    tiny = np.finfo(beta.dtype).tiny
    beta = jnp.where(lax.abs(beta) < tiny, jnp.zeros_like(beta), beta)
    if beta.dtype != np.float32:
        return narrow(src, beta, *rest)
    return lax.platform_dependent(src, beta, *rest, cpu=wide, default=narrow)


# Each evaluation is a jit of its own: one dispatch where autodiff runs op
# by op (an eager grad, an eager shard_map), one named call in a jaxpr.
@partial(jax.jit, static_argnums=(0, 1))
def combination_value(terms, hints, src, beta, dd=None):
    """A combination's value, not differentiable (see `combination`)."""
    operands = (src, beta) if dd is None else (src, beta, dd)

    def wide(src, beta, *dd):
        return _wide.combination(terms, _slope_polynomial, src, beta, *dd)

    def narrow(src, beta, *dd):
        if not dd:
            return _aligned_sum(_parts(terms, hints, src, beta))
        # An infinite dd multiplies the sum, as in `_wide`: inf times each
        # term would make inf - inf of a sum whose sign is known.
        (dd,) = dd
        big = jnp.isinf(dd)
        unit = jnp.where(big, jnp.sign(dd), dd)
        out = _aligned_sum(_parts(terms, hints, src, beta, unit))
        return jnp.where(big, out * dd.astype(out.dtype), out)

    return _evaluate(wide, narrow, *operands)


def _derivative(terms, wrt):
    """The combination d/dsrc (wrt 0) or d/dbeta (wrt 1) of `terms`:
    d/dsrc [n, i, j] = i [n, i-1, j] + [n+1, i, j+1],
    d/dbeta [n, i, j] = j [n, i, j-1] + [n+1, i+1, j]."""
    out = {}
    for c, n, i, j in terms:
        power = (i, j)[wrt]
        lower = (n, i - 1, j) if wrt == 0 else (n, i, j - 1)
        upper = (n + 1, i, j + 1) if wrt == 0 else (n + 1, i + 1, j)
        for key, coef in ((upper, c), (lower, c * power)):
            if coef:
                out[key] = out.get(key, 0) + coef
    return tuple((c, *key) for key, c in sorted(out.items()) if c)


def combination(terms, hints, src, beta, dd=None):
    """dd * sum c src**i beta**j s^(n)(beta src) over `terms` = ((c, n, i,
    j), ...), s the sigmoid, in beta's dtype; differentiable to any order,
    each derivative a combination again (dd=None is 1)."""
    if dd is None:
        return _combination(terms, hints, src, beta)
    return _combination_scaled(terms, hints, src, beta, dd)


def sigmoid_derivative(n, i, j, hints, src, beta, dd=None):
    """dd * src**i * beta**j * s^(n)(beta * src): a one-term `combination`."""
    return combination(((1, n, i, j),), hints, src, beta, dd)


@partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _combination(terms, hints, src, beta):
    return combination_value(terms, hints, src, beta)


@partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _combination_scaled(terms, hints, src, beta, dd):
    return combination_value(terms, hints, src, beta, dd)


def _tangent_terms(evaluate, terms, cdt, src_dot, beta_dot):
    """The src and beta terms of d(terms), `evaluate(terms)` at the primals."""
    out = []
    for wrt, dot in enumerate((src_dot, beta_dot)):
        if not is_zero(dot):
            derivative = _derivative(terms, wrt)
            if derivative:
                out.append(evaluate(derivative) * dot.astype(cdt))
    return out


def _total(out, terms):
    return sum(terms[1:], terms[0]) if terms else jnp.zeros_like(out)


def is_zero(t):
    """A symbolic zero tangent: custom_jvp's SymbolicZero, or ad's Zero
    (which hijax rules receive)."""
    return isinstance(t, (SymbolicZero, ad.Zero))


@partial(_combination.defjvp, symbolic_zeros=True)
def _combination_jvp(terms, hints, primals, tangents):
    src, beta = primals

    def evaluate(terms):
        return _combination(terms, hints, src, beta)

    out = evaluate(terms)
    return out, _total(out, _tangent_terms(evaluate, terms, beta.dtype, *tangents))


@partial(_combination_scaled.defjvp, symbolic_zeros=True)
def _combination_scaled_jvp(terms, hints, primals, tangents):
    src, beta, dd = primals
    src_dot, beta_dot, dd_dot = tangents

    # dd enters each evaluation: never a huge dd times an underflowed slope.
    def evaluate(terms):
        return _combination_scaled(terms, hints, src, beta, dd)

    out = evaluate(terms)
    extra = _tangent_terms(evaluate, terms, beta.dtype, src_dot, beta_dot)
    if not is_zero(dd_dot):
        unit = _combination(terms, hints, src, beta)
        extra.append(unit * dd_dot.astype(unit.dtype))
    return out, _total(out, extra)


# d^k softplus / d beta^k --------------------------------------------------


def _dbeta1(hints, x, beta):
    """D_1 = d softplus / d beta as two (v, k) pairs A, B with
    D_1 = -(A + B) / |beta|.

    D_1 = -(a s(-a) + log1p(e^-a)) / beta**2, a = |beta x|: the same
    expression for either sign of beta x, and a sum of two positive terms,
    so nothing cancels (the textbook (x s(beta x) - softplus(x)) / beta
    loses every digit for beta x above about 17). A = |x| s(-a) is one bind
    at (|x|, -|beta|), its operand's exponent carried apart; B =
    softplus(-|x|, |beta|), the forward op where it has no cancellation.
    Above a = 17 (38 in float64) B is s(-a) / |beta| to below half an ulp
    and joins A: (|x| + 1/|beta|) s(-a) = |x| (1 + 1/a) s(-a). The one
    division by |beta| comes last, for both terms (`_dbeta1_value`).
    """
    cdt = beta.dtype
    ax = lax.abs(x.astype(cdt))
    ab = lax.abs(beta)
    a = ab * ax
    far = a > _DBETA_SWITCH[np.dtype(cdt)]
    mx, ex = _frexp(ax)
    lift = _lift(a, cdt)
    v = bind(ax, mx * _math.exp2_int(lift, cdt), lax.neg(ab), hints)
    # (1 + 1/a) v as v + v / a: only the smaller term (below a fortieth of
    # the sum) rounds.
    inv = jnp.where(far, lax.reciprocal(jnp.where(far, a, 1)), 0)
    first = _normalized(v + v * inv, ex - lift)
    second = _kernels.softplus_kernel(lax.neg(ax), ab, hints)
    second = _normalized(jnp.where(far, jnp.zeros_like(second), second), 0)
    return first, second


def _dbeta1_value(hints, x, beta):
    """D_1 itself: (A + B) aligned, divided by |beta|'s significand (one
    rounding), the exponents applied last."""
    parts = _dbeta1(hints, x, beta)
    mb, eb = _frexp(lax.abs(beta))
    total, top = _aligned_pair(parts)
    return _math.times_pow2(lax.neg(total) / mb, top - eb)


def _dbeta1_parts(hints, x, beta, coef, j):
    """coef * beta**j * D_1 as (v, k) pairs: -coef sign(beta)
    beta**(j - 1) (A + B)."""
    mb, eb = _frexp(beta)
    scale = _power(mb, j - 1)
    c = -coef * jnp.sign(beta)
    return [(v * c * scale, k + eb * (j - 1)) for v, k in _dbeta1(hints, x, beta)]


def _dbeta_terms(k):
    """D_k = (combination) + gamma beta**(1-k) D_1: from
    beta D_k + k D_(k-1) = x**k s^(k-1)(t), D_1 the base."""
    terms, gamma = (), 1
    for order in range(2, k + 1):
        terms = ((1, order - 1, order, -1),) + tuple(
            (-order * c, n, i, j - 1) for c, n, i, j in terms
        )
        gamma = -order * gamma
    return terms, gamma


@partial(jax.jit, static_argnums=(0, 1))
def dbeta_value(k, hints, x, beta):
    """D_k = d^k softplus / d beta^k, not differentiable (`dsoftplus_dbeta`)."""

    def wide(x, beta):
        return _wide.dbeta(k, _dbeta_terms, _slope_polynomial, x, beta)

    def narrow(x, beta):
        if k == 1:
            out = _dbeta1_value(hints, x, beta)
        else:
            terms, gamma = _dbeta_terms(k)
            parts = _dbeta1_parts(hints, x, beta, gamma, 1 - k)
            if terms:
                parts += _parts(terms, hints, x, beta)
            out = _aligned_sum(parts)
        # softplus(+-inf, beta) does not depend on beta (beta != 0), where
        # a s(-a) is inf * 0 in the evaluation.
        flat = jnp.isinf(x) & (beta != 0)
        return jnp.where(flat, jnp.zeros_like(out), out)

    return _evaluate(wide, narrow, x, beta)


@partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def dsoftplus_dbeta(k, hints, x, beta):
    """d^k softplus(x, beta) / d beta^k in beta's dtype, k >= 1.

    d/dx of it is x**k s^(k)(t) (a `combination`), d/dbeta D_(k+1): the
    derivatives of every order are evaluated directly. For k = 2 the two
    parts have one sign (D_1 < 0): the second derivative in beta has no
    cancellation either.
    """
    value = dbeta_value(k, hints, x, beta)
    # The caller sums this: fenced, so that XLA:CPU keeps the kernels in one
    # loop instead of cutting them up for a library reduction.
    return _kernels.fusion_fence(value, x.astype(beta.dtype)) if k == 1 else value


@partial(dsoftplus_dbeta.defjvp, symbolic_zeros=True)
def _dsoftplus_dbeta_jvp(k, hints, primals, tangents):
    x, beta = primals
    x_dot, beta_dot = tangents
    out = dsoftplus_dbeta(k, hints, x, beta)
    terms = []
    if not is_zero(x_dot):
        slope = sigmoid_derivative(k, k, 0, hints, x, beta)
        terms.append(slope * x_dot.astype(beta.dtype))
    if not is_zero(beta_dot):
        terms.append(dsoftplus_dbeta(k + 1, hints, x, beta) * beta_dot)
    return out, _total(out, terms)
