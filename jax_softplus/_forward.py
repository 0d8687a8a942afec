"""The forward op's value: one primitive, lowered per platform.

`softplus_p` evaluates (1/beta) log(1 + exp(beta x)) with the default
kernel of x's dtype or, at `accuracy="highest"`, the correctly rounded one,
which evaluates in float64 where the platform has it and in float32
arithmetic where it does not (TPUs). Its lowering (`_platforms`) picks the
evaluation when XLA lowers it, as the backward op's does, so a program
traces and lowers only its own platform's. It is never differentiated:
`softplus`'s rules (`_softplus`) carry its derivatives.
"""

from __future__ import annotations

import functools

from jax.extend.core import Primitive

from jax_softplus import _compat, _kernels, _platforms, _validate
from jax_softplus._primitive import batch_operands
from jax_softplus._validate import BetaHints

softplus_p = Primitive("softplus")


def value(x, beta, hints, accuracy=None):
    """(1/beta) log(1 + exp(beta x)) in x's dtype, with `accuracy` (None or
    "highest": `_validate.check_accuracy`)."""
    if x.dtype not in _validate.HIGHEST_DTYPES:
        accuracy = None  # float64 and the narrow types: the default kernel
    return softplus_p.bind(x, beta, hints=hints, accuracy=accuracy)


def _softplus_abstract_eval(x, beta, *, hints, accuracy):
    takes = _validate.kernel_dtype(x.dtype) and (
        accuracy is None or x.dtype in _validate.HIGHEST_DTYPES
    )
    cdtype = _validate.compute_dtype(x.dtype) if takes else None
    if not takes or beta.dtype != cdtype or beta.shape not in ((), x.shape):
        raise TypeError(
            "softplus_p takes float x (float32, bfloat16 or float16 at "
            "accuracy='highest') and a beta of its compute dtype (float64 for "
            "float64 x, else float32), 0-d or of x's shape; got "
            f"x {x.str_short()}, beta {beta.str_short()}, accuracy {accuracy!r}."
        )
    return x.update(weak_type=False)


def _softplus_batch(args, dims, *, hints, accuracy):
    (x, beta), axis = batch_operands(args, dims)
    return softplus_p.bind(x, beta, hints=hints, accuracy=accuracy), axis


def _softplus_lowering(kind):
    """The evaluation of a platform kind ("cpu", "gpu", or None)."""

    def evaluate(x, beta, *, hints: BetaHints, accuracy):
        return _kernels.softplus_kernel(x, beta, hints, kind, accuracy=accuracy)

    return evaluate


softplus_p.def_impl(functools.partial(_compat.apply_primitive, softplus_p))
softplus_p.def_abstract_eval(_softplus_abstract_eval)
_platforms.register(softplus_p, _softplus_lowering)
_compat.register_batching_rule(softplus_p, _softplus_batch)
_compat.register_nan_check(softplus_p)
