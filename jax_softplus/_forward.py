"""The forward op's value: the default kernel, or the correctly rounded one
as a primitive of its own.

`softplus`'s default value is traced from `_kernels.softplus_kernel`
directly (its platforms differ only in FMA contraction, which
`lax.platform_dependent` picks when XLA lowers it). The correctly rounded
value (`accuracy=HIGHEST`) evaluates in float64 where the platform has
it and in float32 arithmetic where it does not (TPUs): a primitive lowered
per platform (`_platforms`) picks its evaluation at lowering. It is never
differentiated: `softplus`'s rules (`_softplus`) carry its derivatives.
"""

from __future__ import annotations

import functools

import numpy as np
from jax.extend.core import Primitive

from jax_softplus import (
    _compat,
    _highest,
    _highest32,
    _kernels,
    _platforms,
    _sharding,
    _validate,
    _wide,
)
from jax_softplus._primitive import batch_operands

softplus_highest_p = Primitive("softplus_highest")


def value(x, beta, hints, accuracy=None):
    """(1/beta) log(1 + exp(beta x)) in x's dtype, with `accuracy` (None or
    "highest": `_validate.check_accuracy`)."""
    if accuracy == "highest" and x.dtype in _validate.HIGHEST_DTYPES:
        return softplus_highest_p.bind(x, beta)
    return _kernels.softplus_kernel(x, beta, hints)


def _softplus_highest_abstract_eval(x, beta):
    if x.dtype not in _validate.HIGHEST_DTYPES or beta.dtype != np.float32:
        raise TypeError(
            f"softplus_highest_p takes float32, bfloat16 or float16 x and a "
            f"float32 beta, got {x.dtype} and {beta.dtype}."
        )
    return x.update(weak_type=False)


def _softplus_highest_lowering(kind):
    def evaluate(x, beta):
        if kind is None:
            return _sharding.per_shard(_highest32.softplus, x, beta)
        with _wide._float64():
            return _sharding.per_shard(_highest.softplus, x, beta)

    return evaluate


def _softplus_highest_batch(args, dims):
    (x, beta), axis = batch_operands(args, dims)
    return softplus_highest_p.bind(x, beta), axis


softplus_highest_p.def_impl(
    functools.partial(_compat.apply_primitive, softplus_highest_p)
)
softplus_highest_p.def_abstract_eval(_softplus_highest_abstract_eval)
_platforms.register(softplus_highest_p, _softplus_highest_lowering)
_compat.register_batching_rule(softplus_highest_p, _softplus_highest_batch)
_compat.register_nan_check(softplus_highest_p)
