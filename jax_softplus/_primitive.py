"""The `softplus_backward` primitive and its rules.

Operands are `(src, diff_dst, beta)`. `beta` is an operand, not a parameter,
so it can be traced, batched and differentiated; it is 0-d, except inside a
`vmap` over a per-example beta, where the batching rule broadcasts it to the
data's shape. Its two parameters are hints from a concrete beta
(`_validate.BetaHints`): `beta_exact`, that `beta * src` is exact, so the
lowering may skip the error-free product, and `beta_moderate`, that |beta| is
in [2**-64, 2**64], so it may skip rebalancing beta and src. Both default to
False and never change the result's bits.

Rules are registered in one block at the bottom of this module.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad, mlir

from jax_softplus import _compat, _math, _sharding

softplus_backward_p = Primitive("softplus_backward")
_OPERANDS = ("src", "diff_dst", "beta")


# On AVX-512 CPUs XLA vectorises float32 loops 256 bits wide by default; 512
# bits ran the float32 kernel at 1.5x instead of 2.2-2.4x the donated a*b
# floor (bfloat16 1.8x against 1.9x, float16 equal), with identical bits.
# It is a CPU option; other backends ignore it. It can only be given to the
# library's own top-level jits (JAX refuses compiler options on nested
# jits); users' jits can set XLA_FLAGS=--xla_cpu_prefer_vector_width=512.
_WIDE_VECTORS = {"xla_cpu_prefer_vector_width": 512}


def own_jit(fun, **jit_kwargs):
    """`jax.jit` for the library's top-level calls, with wide CPU vectors."""
    return jax.jit(fun, compiler_options=_WIDE_VECTORS, **jit_kwargs)


def bind(src, diff_dst, beta, *, beta_exact=False, beta_moderate=False):
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
        src, diff_dst, beta, beta_exact=beta_exact, beta_moderate=beta_moderate
    )


_compiled = own_jit(bind, static_argnames=("beta_exact", "beta_moderate"))


def compiled(src, diff_dst, beta, **params):
    """Run the compiled lowering: there is no second copy of the math.

    The primitive's impl; the public wrapper calls it directly for eager
    calls. Under `jax.disable_jit()` the jit would run `bind` op by op and
    `bind` would come back here forever, so it compiles anyway, as JAX's own
    `apply_primitive` does.
    """
    if jax.config.jax_disable_jit:
        with jax.disable_jit(False):
            return _compiled(src, diff_dst, beta, **params)
    return _compiled(src, diff_dst, beta, **params)


def _softplus_backward_impl(src, diff_dst, beta, **params):
    return compiled(src, diff_dst, beta, **params)


def _softplus_backward_abstract_eval(src, diff_dst, beta, **params):
    """Shapes and dtypes were validated before `bind`; here they are asserted.

    The mesh types are checked, not asserted: `bind` matches them, but
    `softplus_backward_p` is public, and a direct bind could otherwise type
    the result as replicated where it varies, or with `src`'s sharding alone.
    JAX's own elementwise primitives refuse such operands too.
    """
    del params
    assert src.shape == diff_dst.shape, (src.shape, diff_dst.shape)
    assert src.dtype == diff_dst.dtype, (src.dtype, diff_dst.dtype)
    assert beta.shape in ((), src.shape), (beta.shape, src.shape)
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


def _softplus_backward_kernel(
    src, diff_dst, beta, *, cpu, beta_exact=False, beta_moderate=False
):
    """The lowering, traced into StableHLO by `mlir.lower_fun`.

    On CPUs every NaN of the bfloat16 kernel has its low 16 bits clear once
    beta's is (`_math.canonical_nan`), so the final rounding needs no NaN
    select: about 5% of the bfloat16 loop.
    """
    dtype = src.dtype
    if dtype == np.float64:
        return _math.sigmoid_times_f64(src, diff_dst, beta)
    if dtype == np.float32:
        return _math.sigmoid_times_f32(
            src,
            diff_dst,
            beta,
            compensate=not beta_exact,
            balance=not beta_moderate,
        )
    if dtype == np.float16:
        kernel = _math.sigmoid_times_f16
    else:
        kernel = _math.sigmoid_times_bf16
        beta = _math.canonical_nan(beta) if cpu else beta
    out = kernel(_math.to_f32(src), _math.to_f32(diff_dst), beta)
    return _math.from_f32(out, dtype, nan_low_bits_clear=cpu)


def _softplus_backward_jvp(primals, tangents, **params):
    """Tangent of g * s(b x), with s the sigmoid and s' = s(t) s(-t).

    d/dg is the op itself (it is linear in g); d/dx and d/db share
    g * s(t) * s(-t) * (b dx + x db), formed as two nested binds so that the
    tiny factor s(-t) keeps its relative accuracy.
    """
    src, diff_dst, beta = primals
    src_dot, diff_dst_dot, beta_dot = tangents
    out = bind(src, diff_dst, beta, **params)
    dtype = src.dtype
    terms = []
    if type(diff_dst_dot) is not ad.Zero:
        terms.append(bind(src, diff_dst_dot, beta, **params))
    w = None
    if type(src_dot) is not ad.Zero:
        w = lax.convert_element_type(beta, dtype) * src_dot
    if type(beta_dot) is not ad.Zero:
        w_beta = src * lax.convert_element_type(beta_dot, dtype)
        w = w_beta if w is None else w + w_beta
    if w is not None:
        inner = bind(src, diff_dst * w, lax.neg(beta), **params)
        terms.append(bind(src, inner, beta, **params))
    tangent = terms[0]
    for term in terms[1:]:
        tangent = tangent + term
    return out, tangent


def _softplus_backward_transpose(ct, src, diff_dst, beta, **params):
    """The op is linear in diff_dst only, and diagonal: its own transpose."""
    assert not ad.is_undefined_primal(src)
    assert not ad.is_undefined_primal(beta)
    assert ad.is_undefined_primal(diff_dst)
    if type(ct) is ad.Zero:
        return None, None, None
    return None, bind(src, ct, beta, **params), None


def _softplus_backward_batch(args, dims, **params):
    """Batch every combination of mapped src, diff_dst and beta.

    src and diff_dst share the output's batch axis (the first mapped one's);
    an unmapped one is broadcast. A mapped beta is broadcast to the full
    batched shape, which the kernel takes elementwise.
    """
    src, diff_dst, beta = args
    src_dim, dd_dim, beta_dim = dims
    size = next(x.shape[d] for x, d in zip(args, dims, strict=True) if d is not None)
    axis = src_dim if src_dim is not None else dd_dim
    if axis is None:
        axis = 0
    # Tuples, not NumPy: under jax.export the dimensions may be symbolic.
    shape = (
        src.shape if src_dim is None else src.shape[:src_dim] + src.shape[src_dim + 1 :]
    )
    batched_shape = shape[:axis] + (size,) + shape[axis:]

    def to_axis(x, d):
        if d is None:
            return lax.broadcast_in_dim(
                x, batched_shape, [i for i in range(len(batched_shape)) if i != axis]
            )
        return jnp.moveaxis(x, d, axis)

    src = to_axis(src, src_dim)
    diff_dst = to_axis(diff_dst, dd_dim)
    if beta_dim is not None and beta.ndim == 1:
        # A 0-d beta mapped over: one value per example along `axis`.
        beta = lax.broadcast_in_dim(beta, batched_shape, (axis,))
    elif beta.ndim != 0:
        beta = to_axis(beta, beta_dim)
    return bind(src, diff_dst, beta, **params), axis


softplus_backward_p.def_impl(_softplus_backward_impl)
softplus_backward_p.def_abstract_eval(_softplus_backward_abstract_eval)
for _cpu, _platform in ((False, None), (True, "cpu")):
    mlir.register_lowering(
        softplus_backward_p,
        mlir.lower_fun(
            functools.partial(_softplus_backward_kernel, cpu=_cpu),
            multiple_results=False,
        ),
        platform=_platform,
    )
ad.primitive_jvps[softplus_backward_p] = _softplus_backward_jvp
ad.primitive_transposes[softplus_backward_p] = _softplus_backward_transpose
_compat.register_batching_rule(softplus_backward_p, _softplus_backward_batch)
