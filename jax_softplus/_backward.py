"""Public wrappers around the primitive: validate, then bind."""

from __future__ import annotations

import warnings
from typing import Any

import jax

from jax_softplus import _compat, _sharding, _validate
from jax_softplus._primitive import bind, compiled, own_jit

ArrayLike = Any


def softplus_backward(
    src: ArrayLike, diff_dst: ArrayLike, beta: ArrayLike = 1.0
) -> jax.Array:
    r"""Gradient of softplus: oneDNN's SoftPlusBackward.

    $$\mathrm{diff\_src} = \mathrm{diff\_dst} \cdot \sigma(\beta \cdot \mathrm{src}),
    \qquad \sigma(t) = \frac{1}{1 + e^{-t}}.$$

    float32 data is computed to about 2 ulp over the whole range, including
    the tail where $\sigma(\beta\,\mathrm{src})$ underflows but the product
    does not; bfloat16 and float16 are computed in float32 and rounded once.
    The op is a primitive (`softplus_backward_p`) lowered to plain StableHLO,
    so it fuses under `jax.jit`, batches under `jax.vmap` (per-example
    `beta` included) and differentiates to any order in reverse and forward
    mode.

    Args:
      src: the forward input, float32, bfloat16 or float16 (float64 with
        `jax_enable_x64`). NumPy arrays and Python floats are converted.
      diff_dst: the gradient with respect to the forward output; same dtype
        and shape as `src` (no broadcasting, no promotion).
      beta: a real scalar, default 1.0. Negative values and 0 are allowed
        (`beta = 0` gives `0.5 * diff_dst`). It may be traced: a new value
        does not recompile.

    Returns:
      `diff_src`, with the shape and dtype of `src`.

    Raises:
      TypeError: a non-float or unsupported dtype, `src` and `diff_dst` of
        different dtypes, or a `beta` that is not a real number.
      ValueError: `src` and `diff_dst` of different shapes, or sharded over
        different explicit mesh axes along one dimension; a non-scalar
        `beta`; a concrete `beta` that is NaN, infinite or beyond the float32
        range; or an operand that was donated (deleted) earlier.

    Example:
      >>> import jax.numpy as jnp
      >>> from jax_softplus import softplus_backward
      >>> softplus_backward(jnp.array([-1.0, 0.0, 2.0]), jnp.ones(3), beta=2.0)
      Array([0.11920292, 0.5       , 0.98201376], dtype=float32)
    """
    args, hints = _validated(src, diff_dst, beta)
    if _compat.eager(*args):
        # Straight to the compiled kernel that bind would reach through the
        # primitive's dispatch (same bits, about 20 us less per call).
        src, diff_dst, checked = args
        beta = _sharding.place_beta(beta, checked, diff_dst)
        return compiled(src, diff_dst, beta, **hints._asdict())
    return bind(*args, **hints._asdict())


def _validated(src, diff_dst, beta):
    src, diff_dst = _validate.operand_pair(src, diff_dst)
    beta, hints = _validate.beta(beta, src.dtype, forward=False)
    return (src, diff_dst, beta), hints


def _inplace(src, diff_dst, beta, hints, layout=None):
    out = bind(src, diff_dst, beta, **hints._asdict())
    if layout is not None:
        # The result must be laid out as diff_dst for XLA to reuse its buffer;
        # left to itself it may follow src's sharding and allocate.
        out = _sharding.constrain(out, layout)
    return out


# beta stays a traced argument; only the static hints about a concrete beta
# (a power of two: no error-free product, about 15% faster in float32; or an
# extreme value) pick between at most four compilations per shape, with the
# same bits.
_inplace_jit = own_jit(
    _inplace, donate_argnames=("diff_dst",), static_argnames=("hints", "layout")
)


def _layout(src, diff_dst):
    """diff_dst's sharding where src is laid out otherwise, else None."""
    mine, theirs = diff_dst.sharding, src.sharding
    if mine == theirs or mine.is_equivalent_to(theirs, diff_dst.ndim):
        return None
    return mine


def _inplace_self(diff_dst, beta, hints):
    return _inplace(diff_dst, diff_dst, beta, hints)


# One array as both operands: the runtime refuses to donate a buffer that the
# same call also reads as another argument, so the kernel reads its one
# (donated) argument twice. Still in place: each element is read, then written.
_inplace_self_jit = own_jit(
    _inplace_self, donate_argnames=("diff_dst",), static_argnames=("hints",)
)


def softplus_backward_inplace(
    src: ArrayLike, diff_dst: ArrayLike, beta: ArrayLike = 1.0
) -> jax.Array:
    r"""`softplus_backward` that writes `diff_src` over `diff_dst`.

    This is oneDNN's in-place mode, expressed as buffer donation under
    `jax.jit`: XLA aliases the output to `diff_dst`'s buffer, so no array is
    allocated. On the CPU that also avoids the page faults of a fresh output,
    which cost several times the arithmetic for large arrays.

    After the call `diff_dst` is deleted (`diff_dst.is_deleted()` is true),
    whether it was passed by position or by keyword: use the returned array.
    (The runtime declines to donate a buffer that is still referenced
    elsewhere, such as by a NumPy view from `np.asarray` on the CPU; then a
    `UserWarning` says so, `diff_dst` is unchanged and the result is new.)
    With sharded arrays the result is laid out as `diff_dst`.
    `src` may be the same array as `diff_dst` (then
    `diff_src = x * sigmoid(beta * x)`, still in place, and `x` is deleted).
    The arguments are validated before the jitted call, so a concrete bad
    `beta` (NaN, inf, 1e40) is rejected although `beta` is then traced: a new
    value does not recompile. Like any jitted function it has `.lower(...)`.

    Args:
      src: as in `softplus_backward`.
      diff_dst: as in `softplus_backward`; donated. A NumPy array is copied
        to the device first, and that copy is what is donated.
      beta: as in `softplus_backward`.

    Returns:
      `diff_src`, in `diff_dst`'s former buffer.

    Raises:
      TypeError, ValueError: as `softplus_backward`, including for a
        `diff_dst` that an earlier call already donated.

    Example:
      >>> import jax.numpy as jnp
      >>> from jax_softplus import softplus_backward_inplace
      >>> g = jnp.ones(3)
      >>> out = softplus_backward_inplace(jnp.zeros(3), g)
      >>> out, g.is_deleted()
      (Array([0.5, 0.5, 0.5], dtype=float32), True)
    """
    args, hints = _validated(src, diff_dst, beta)
    if not _compat.eager(*args):
        # Under an outer jit/vmap/grad (closed-over arrays included) there is
        # no buffer to donate: the outer computation owns its buffers (donate
        # its arguments instead).
        return bind(*args, **hints._asdict())
    src, diff_dst, checked = args
    # Never diff_dst itself (a 0-d one): a donated buffer cannot be read too.
    beta = _sharding.place_beta(None if beta is diff_dst else beta, checked, diff_dst)
    if src is diff_dst:
        out = _inplace_self_jit(diff_dst, beta, hints=hints)
    else:
        out = _inplace_jit(
            src, diff_dst, beta, hints=hints, layout=_layout(src, diff_dst)
        )
    if not (diff_dst.is_deleted() or jax.config.jax_disable_jit):
        # The runtime declines, silently, to donate a buffer that something
        # else still references, such as a NumPy view from np.asarray.
        # (Under disable_jit nothing is donated, as documented.)
        warnings.warn(
            "softplus_backward_inplace could not donate diff_dst: its buffer "
            "is still referenced elsewhere (a NumPy view from np.asarray, for "
            "one), so the result is a new array and diff_dst is unchanged.",
            stacklevel=2,
        )
    return out


def _lower(src, diff_dst, beta=1.0):
    args, hints = _validated(src, diff_dst, beta)
    return _inplace_jit.lower(*args, hints=hints, layout=_layout(*args[:2]))


softplus_backward_inplace.lower = _lower  # type: ignore[attr-defined]
softplus_backward_inplace._cache_size = _inplace_jit._cache_size  # type: ignore[attr-defined]
