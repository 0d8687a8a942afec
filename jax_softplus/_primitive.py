"""The `softplus_backward` primitive and its rules.

Operands are `(src, diff_dst, beta)`. `beta` is an operand, not a parameter,
so it can be traced, batched and differentiated; it is 0-d, except inside a
`vmap` over a per-example beta, where the batching rule broadcasts it to the
data's shape. Its parameters: `beta_hints`, what a concrete beta tells the
lowering (`_validate.BetaHints`): that `beta * src` is exact, so the
error-free product may be skipped, that |beta| is in [2**-64, 2**64], so
rebalancing may be, and that |beta| is below 2**-100 (the default claims
nothing; hints change no bit of the result for a finite src);
`accuracy`, None for the default kernels or "highest" for the correctly
rounded evaluation (`_highest`); and `inplace`, which asks the lowering
for a program that XLA can write over a donated diff_dst (at HIGHEST, the
two passes: `_rounding`), the same bits either way.

The impl is JAX's own `apply_primitive`, so `disable_jit`, `debug_nans` and
`debug_infs` treat the op as they treat `lax.mul`. Rules are registered in
one block at the bottom of this module, but for the JVP rule, which is
written in the derivative families and registered with them
(`_derivatives`), so that this module imports neither.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad

from jax_softplus import _compat, _jet, _kernels, _platforms, _sharding
from jax_softplus._validate import BetaHints, kernel_dtype

softplus_backward_p = Primitive("softplus_backward")
_OPERANDS = ("src", "diff_dst", "beta")
NO_HINTS = BetaHints()


def bind(src, diff_dst, beta, hints=None, accuracy=None, inplace=False):
    """Bind the primitive; every bind in the library goes through here.

    The operands first get one type, as for JAX's own elementwise ops: inside
    `shard_map` a replicated operand is cast to vary with the others, and
    over explicit mesh axes a replicated dimension is resharded to follow a
    sharded one (a `ValueError` for two different mesh axes).
    """
    src, diff_dst, beta = _sharding.match_varying(src, diff_dst, beta)
    if np.ndim(beta):  # a per-example beta, broadcast by the batching rule
        src, diff_dst, beta = _sharding.match_sharding(_OPERANDS, src, diff_dst, beta)
    else:
        src, diff_dst = _sharding.match_sharding(_OPERANDS[:2], src, diff_dst)
    return softplus_backward_p.bind(
        src,
        diff_dst,
        beta,
        beta_hints=hints or NO_HINTS,
        accuracy=accuracy,
        inplace=inplace,
    )


def _arrays(*values):
    """The operands as arrays: a rule may be handed Python floats (a JVP's
    primal or tangent, a literal of a batched trace); each keeps its type."""
    return tuple(
        v if hasattr(v, "shape") else jnp.asarray(v, jax.typeof(v).dtype)
        for v in values
    )


def _softplus_backward_abstract_eval(
    src, diff_dst, beta, *, beta_hints=NO_HINTS, accuracy=None, inplace=False
):
    """The result's type: `src`'s, strongly typed.

    The public functions validate before `bind`; a direct bind of operands
    the kernel cannot take gets a `TypeError` here, as JAX's own primitives
    give. The mesh types are checked too: `bind` matches them, but a direct
    bind could otherwise type the result as replicated where it varies, or
    with `src`'s sharding alone.
    """
    del beta_hints, inplace
    if accuracy not in (None, "highest"):
        raise TypeError(
            f"softplus_backward_p: accuracy is {accuracy!r}; it takes None or "
            "'highest' (the public functions take jax.lax.AccuracyMode)."
        )
    for name, aval in zip(_OPERANDS[:2], (src, diff_dst), strict=True):
        if not kernel_dtype(aval.dtype):
            raise TypeError(
                f"softplus_backward_p: {name} has dtype {aval.dtype}; it takes "
                "float data (float32, bfloat16, float16, float64, float8, float4)."
            )
    if not jnp.issubdtype(beta.dtype, jnp.floating):
        raise TypeError(
            f"softplus_backward_p: beta has dtype {beta.dtype}; it takes a "
            "floating-point beta (float32, or float64 for float64 data)."
        )
    if src.dtype != diff_dst.dtype:
        raise TypeError(
            "softplus_backward_p: src and diff_dst must have one dtype, got "
            f"{src.dtype} and {diff_dst.dtype}."
        )
    if src.shape != diff_dst.shape or beta.shape not in ((), src.shape):
        raise TypeError(
            "softplus_backward_p: src and diff_dst must have one shape and beta "
            f"be 0-d or of that shape, got src {src.shape}, diff_dst "
            f"{diff_dst.shape} and beta {beta.shape}."
        )
    operands = (src, diff_dst, beta)
    axes = [_compat.varying_axes(a) for a in operands]
    specs = [_sharding.sharding_spec(a) for a in operands]
    data = slice(0, 3 if beta.ndim else 2)  # a 0-d beta has no sharding
    if axes[1:] != axes[:-1] or specs[data][1:] != specs[data][:-1]:
        listing = ", ".join(
            f"{name} varying over {{{', '.join(map(repr, a))}}} with spec P{spec or ()}"
            for name, a, spec in zip(_OPERANDS, axes, specs, strict=True)
        )
        raise ValueError(
            "softplus_backward_p's operands must have one mesh type (the same "
            f"varying shard_map axes and explicit sharding), got {listing}. "
            "Call jax_softplus.softplus_backward, which matches them, or use "
            "jax.lax.pcast / jax.sharding.reshard before binding."
        )
    return src.update(weak_type=False)


def _softplus_backward_transpose(
    ct, src, diff_dst, beta, *, beta_hints=NO_HINTS, accuracy=None, inplace=False
):
    """The op is linear in diff_dst only, and diagonal: its own transpose."""
    assert not ad.is_undefined_primal(src)
    assert not ad.is_undefined_primal(beta)
    assert ad.is_undefined_primal(diff_dst)
    if type(ct) is ad.Zero:
        return None, None, None
    src, beta, ct = _arrays(src, beta, ct)
    return None, bind(src, ct, beta, beta_hints, accuracy), None


def batch_operands(args, dims):
    """Elementwise batching of `(*data, beta)`: every combination mapped.

    The data operands share the output's batch axis (the first mapped one's);
    an unmapped one is broadcast. A mapped beta is broadcast to the full
    batched shape, which the kernels take elementwise. Returns the operands
    and that axis (the backward op's batching rule, and the forward op's);
    where nothing is mapped (a HiPrim's rule may be asked), the operands as
    they are and None.
    """
    *data, beta = args = _arrays(*args)
    *data_dims, beta_dim = dims
    if all(d is None for d in dims):
        return args, None
    size = next(x.shape[d] for x, d in zip(args, dims, strict=True) if d is not None)
    axis = next((d for d in data_dims if d is not None), 0)
    # Tuples, not NumPy: under jax.export the dimensions may be symbolic.
    first, first_dim = data[0], data_dims[0]
    shape = (
        first.shape
        if first_dim is None
        else first.shape[:first_dim] + first.shape[first_dim + 1 :]
    )
    batched_shape = shape[:axis] + (size,) + shape[axis:]

    def to_axis(x, d):
        if d is None:
            return lax.broadcast_in_dim(
                x, batched_shape, [i for i in range(len(batched_shape)) if i != axis]
            )
        return jnp.moveaxis(x, d, axis)

    data = [to_axis(x, d) for x, d in zip(data, data_dims, strict=True)]
    if beta_dim is not None and beta.ndim == 1:
        # A 0-d beta mapped over: one value per example along `axis`.
        beta = lax.broadcast_in_dim(beta, batched_shape, (axis,))
    elif beta.ndim != 0:
        beta = to_axis(beta, beta_dim)
    return (*data, beta), axis


def _softplus_backward_batch(
    args, dims, *, beta_hints=NO_HINTS, accuracy=None, inplace=False
):
    """Batch every combination of mapped src, diff_dst and beta."""
    args, axis = batch_operands(args, dims)
    return bind(*args, beta_hints, accuracy, inplace), axis


def _softplus_backward_lowering(kind):
    """The kernel of a platform kind ("cpu", "gpu", or None: `_platforms`)."""

    def kernel(
        src, diff_dst, beta, *, beta_hints=NO_HINTS, accuracy=None, inplace=False
    ):
        return _kernels.backward_kernel(
            src, diff_dst, beta, beta_hints, kind, accuracy=accuracy, inplace=inplace
        )

    return kernel


softplus_backward_p.def_impl(
    functools.partial(_compat.apply_primitive, softplus_backward_p)
)
softplus_backward_p.def_abstract_eval(_softplus_backward_abstract_eval)
_platforms.register(softplus_backward_p, _softplus_backward_lowering)
ad.primitive_transposes[softplus_backward_p] = _softplus_backward_transpose
_compat.register_batching_rule(softplus_backward_p, _softplus_backward_batch)
_compat.register_nan_check(softplus_backward_p)
_jet.register(softplus_backward_p, softplus_backward_p.bind)
