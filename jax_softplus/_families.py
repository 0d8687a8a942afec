"""The derivative families' values: a primitive, evaluated per platform.

Every derivative of `softplus_backward` and `softplus` is a sum of two
families (`_derivatives`): a combination dd * sum c src**i beta**j
s^(n)(beta src) over static terms (c, n, i, j), s the sigmoid, and
D_k = d^k softplus / d beta^k. Each value is one bind of
`softplus_family_p`, whose lowering is chosen by platform when XLA lowers
the program (`_platforms`), and only that one is traced:

* where the platform has float64 (CPUs, CUDA and ROCm GPUs), float32
  compute (float32, bfloat16 and float16 data) is evaluated in float64
  from the exact t and rounded once (`_wide`);
* otherwise (TPUs), and for float64 data everywhere, in the compute
  dtype, in double words with the exponents carried apart (`_narrow`).

The primitive is never differentiated: `_derivatives` wraps its values in
JVP rules written in the same families. On a CPU its output sits behind
`_kernels.fusion_fence`, since callers sum it (a gradient in beta, a loss).
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive

from jax_softplus import _compat, _kernels, _narrow, _platforms, _sharding, _wide
from jax_softplus._primitive import batch_operands

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
    tiny = jnp.finfo(beta.dtype).tiny
    return jnp.where(lax.abs(beta) < tiny, jnp.zeros_like(beta), beta)


def _softplus_family_lowering(kind):
    """The evaluation of a platform kind (`_platforms`): float32 compute in
    float64 where the platform has float64 ("cpu", "gpu"), else in the
    compute dtype with the exponents carried apart."""
    wide = _platforms.wide_derivatives(kind)

    def evaluate(src, beta, *dd, family, hints):
        beta = _flushed(beta)
        family_kind, spec = family
        evaluation = _wide if wide and beta.dtype == np.float32 else _narrow
        if family_kind == "combination":
            out = evaluation.combination(spec, hints, src, beta, *dd)
        else:
            out = evaluation.dbeta(spec, hints, src, beta)
        # On a CPU callers sum it (a gradient in beta, a loss): see
        # `_kernels.fusion_fence`.
        if kind == "cpu":
            return _kernels.fusion_fence(out, src.astype(out.dtype))
        return out

    return evaluate


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
_platforms.register(softplus_family_p, _softplus_family_lowering)
_compat.register_batching_rule(softplus_family_p, _softplus_family_batch)
