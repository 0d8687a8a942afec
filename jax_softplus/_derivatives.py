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
of the two families evaluated from primal values (`_families`, one bind of
`softplus_family_p` each), times a tangent. The JVP rule of the backward
primitive itself is here too, written in the families; it is registered at
the bottom of this module, so that the imports run one way
(`_primitive` <- `_families` <- `_derivatives` <- `_softplus`).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero
from jax.interpreters import ad

from jax_softplus import _primitive
from jax_softplus._families import combination_value, dbeta_value
from jax_softplus._primitive import bind, softplus_backward_p


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


@partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def dsoftplus_dbeta(k, hints, x, beta):
    """d^k softplus(x, beta) / d beta^k in beta's dtype, k >= 1.

    d/dx of it is x**k s^(k)(t) (a `combination`), d/dbeta D_(k+1): the
    derivatives of every order are evaluated directly. For k = 2 the two
    parts have one sign (D_1 < 0): the second derivative in beta has no
    cancellation either.
    """
    return dbeta_value(k, hints, x, beta)  # fenced on a CPU (`_families`)


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


# The backward primitive's JVP --------------------------------------------


def _softplus_backward_jvp(
    primals, tangents, *, beta_hints=_primitive.NO_HINTS, accuracy=None, inplace=False
):
    """Tangent of g * s(b x), with s the sigmoid and s' = s(t) s(-t).

    d/dg is the op itself (it is linear in g). d/dx = g b s'(t) and
    d/db = g x s'(t) are members of `_derivatives`' family, evaluated from
    the primals with g inside (never a huge g times an underflowed slope),
    and then multiply their tangents: linear in the tangents, so reverse
    mode transposes them to one product each, and their own rules carry
    every higher order. The d/dg term is the op at the primal's `accuracy`;
    the others are the families' (docs/accuracy.md).
    """
    src, diff_dst, beta = _primitive._arrays(*primals)
    src_dot, diff_dst_dot, beta_dot = (
        t if type(t) is ad.Zero else _primitive._arrays(t)[0] for t in tangents
    )
    out = bind(src, diff_dst, beta, beta_hints, accuracy, inplace)
    dtype, cdt = src.dtype, beta.dtype
    terms = []
    if type(diff_dst_dot) is not ad.Zero:
        terms.append(bind(src, diff_dst_dot, beta, beta_hints, accuracy))
    if type(src_dot) is not ad.Zero:
        slope = sigmoid_derivative(1, 0, 1, beta_hints, src, beta, diff_dst)
        terms.append((slope * src_dot.astype(cdt)).astype(dtype))
    if type(beta_dot) is not ad.Zero:
        slope = sigmoid_derivative(1, 1, 0, beta_hints, src, beta, diff_dst)
        terms.append((slope * beta_dot).astype(dtype))
    tangent = terms[0]
    for term in terms[1:]:
        tangent = tangent + term
    return out, tangent


ad.primitive_jvps[softplus_backward_p] = _softplus_backward_jvp
