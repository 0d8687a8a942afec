"""The derivative families' values: a primitive, evaluated per platform.

Every derivative of `softplus_backward` and `softplus` is a sum of two
families (`_derivatives`): a combination dd * sum c src**i beta**j
s^(n)(beta src) over static terms (c, n, i, j), s the sigmoid, and
D_k = d^k softplus / d beta^k. Each value is one bind of
`softplus_family_p`, whose lowering is chosen by platform when XLA lowers
the program, and only that one is traced:

* on a CPU, float32 compute (float32, bfloat16 and float16 data) is
  evaluated in float64 from the exact t and rounded once (`_wide`);
* otherwise, and for float64 data everywhere, in the compute dtype, each
  term's power-of-two exponent carried apart from its significand: the
  factors' significands enter the backward kernel lifted by a power of two
  chosen from t, so that the kernel's result is normal wherever the exact
  one is; each term is kept as (significand, exponent) and the terms are
  summed aligned to the largest exponent, the exponent applied at the end
  (XLA:CPU flushes subnormals, so a term may not pass through one). Nothing
  overflows or flushes early, whatever the order of the factors' sizes (a
  diff_dst of 3e38 times a tiny slope, a beta of 1e-5 whose x**4 is huge).

The primitive is never differentiated: `_derivatives` wraps its values in
JVP rules written in the same families. On a CPU its output sits behind
`_kernels.fusion_fence`, since callers sum it (a gradient in beta, a loss).
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import mlir

from jax_softplus import _compat, _kernels, _math, _math64, _sharding, _wide
from jax_softplus._primitive import batch_operands, bind

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
        factors = [f for f in (_math.power(ms, i), _math.power(mb, j)) if f is not None]
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
    scale = _math.power(mb, j - 1)
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


def _combination_narrow(terms, hints, src, beta, *dd):
    if not dd:
        return _aligned_sum(_parts(terms, hints, src, beta))
    # An infinite dd multiplies the sum, as in `_wide`: inf times each term
    # would make inf - inf of a sum whose sign is known.
    (dd,) = dd
    big = jnp.isinf(dd)
    unit = jnp.where(big, jnp.sign(dd), dd)
    out = _aligned_sum(_parts(terms, hints, src, beta, unit))
    return jnp.where(big, out * dd.astype(out.dtype), out)


def _dbeta_narrow(k, hints, x, beta):
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
    return jnp.where(jnp.isinf(x) & (beta != 0), jnp.zeros_like(out), out)


# The primitive ----------------------------------------------------------------

softplus_family_p = Primitive("softplus_family")


def _family_bind(src, beta, *dd, family, hints):
    """Bind with the operands matched as `_primitive.bind` matches them."""
    operands = _sharding.match_varying(src, beta, *dd)
    src, beta, *dd = operands
    data = (src, *dd)
    names = ("src", "diff_dst")[: len(data)]
    if np.ndim(beta):
        *data, beta = _sharding.match_sharding((*names, "beta"), *data, beta)
    elif dd:
        data = _sharding.match_sharding(("src", "diff_dst"), *data)
    src, *dd = data
    return softplus_family_p.bind(src, beta, *dd, family=family, hints=hints)


def combination_value(terms, hints, src, beta, dd=None):
    """dd * sum c src**i beta**j s^(n)(beta src) over `terms`, in beta's
    dtype: one bind, not differentiable (see `_derivatives.combination`)."""
    rest = () if dd is None else (dd,)
    return _family_bind(src, beta, *rest, family=("combination", terms), hints=hints)


def dbeta_value(k, hints, x, beta):
    """D_k = d^k softplus / d beta^k in beta's dtype: one bind, not
    differentiable (see `_derivatives.dsoftplus_dbeta`)."""
    return _family_bind(x, beta, family=("dbeta", k), hints=hints)


def _softplus_family_abstract_eval(src, beta, *dd, family, hints):
    """src's shape (and mesh type) in beta's dtype, the compute dtype."""
    del family, hints
    return src.update(dtype=beta.dtype, weak_type=False)


def _flushed(beta):
    """A subnormal beta is 0, as the public boundary makes a concrete one
    and as the CPU's arithmetic reads it (the exponent bookkeeping would
    read its bits)."""
    tiny = np.finfo(beta.dtype).tiny
    return jnp.where(lax.abs(beta) < tiny, jnp.zeros_like(beta), beta)


def _softplus_family_lowering(cpu):
    def evaluate(src, beta, *dd, family, hints):
        beta = _flushed(beta)
        kind, spec = family
        if cpu and beta.dtype == np.float32:
            if kind == "combination":
                return _wide.combination(spec, _slope_polynomial, src, beta, *dd)
            return _wide.dbeta(spec, _dbeta_terms, _slope_polynomial, src, beta)
        if kind == "combination":
            out = _combination_narrow(spec, hints, src, beta, *dd)
        else:
            out = _dbeta_narrow(spec, hints, src, beta)
        return _kernels.fusion_fence(out, src.astype(out.dtype)) if cpu else out

    return mlir.lower_fun(evaluate, multiple_results=False)


def _softplus_family_batch(args, dims, *, family, hints):
    """Elementwise in (src, [diff_dst], beta): the backward op's batching."""
    src, beta, *dd = args
    src_dim, beta_dim, *dd_dims = dims
    (src, *dd, beta), axis = batch_operands(
        (src, *dd, beta), (src_dim, *dd_dims, beta_dim)
    )
    return _family_bind(src, beta, *dd, family=family, hints=hints), axis


softplus_family_p.def_impl(
    functools.partial(_compat.apply_primitive, softplus_family_p)
)
softplus_family_p.def_abstract_eval(_softplus_family_abstract_eval)
mlir.register_lowering(softplus_family_p, _softplus_family_lowering(cpu=False))
mlir.register_lowering(
    softplus_family_p, _softplus_family_lowering(cpu=True), platform="cpu"
)
_compat.register_batching_rule(softplus_family_p, _softplus_family_batch)
