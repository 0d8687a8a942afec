"""The backward ops' public functions: validate, then dispatch."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol, cast

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jax_softplus import _compat, _dispatch, _validate
from jax_softplus._validate import Accuracy


def softplus_backward(
    src: ArrayLike,
    diff_dst: ArrayLike,
    beta: ArrayLike = 1.0,
    *,
    accuracy: Accuracy = None,
) -> jax.Array:
    """Gradient of softplus: oneDNN's SoftPlusBackward.

    diff_src = diff_dst * sigmoid(beta * src), sigmoid(t) = 1 / (1 + exp(-t)).

    float32 data is within 2.5 ulp of the exact value over the whole range,
    including the tail where sigmoid(beta * src) underflows but the product
    does not, float64 within 1 ulp; bfloat16 and float16 are computed in
    float32 and rounded once (docs/accuracy.md).
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
      accuracy: keyword-only, as in `jax.lax`. None or
        `jax.lax.AccuracyMode.DEFAULT`: the default kernel.
        `jax.lax.AccuracyMode.HIGHEST`: the correctly rounded result (round
        to nearest even of the exact value) for float32, bfloat16 and
        float16 data, evaluated in float64 (on TPUs, which have none, in float32
        double words); float64 data take the default kernel (within 1 ulp).
        A `jax.lax.Tolerance`: the cheapest of the two whose bound meets it.

    Returns:
      `diff_src`, with the shape and dtype of `src`.

    Raises:
      TypeError: a non-float or unsupported dtype, `src` and `diff_dst` of
        different dtypes, a `beta` that is not a real number, or an
        `accuracy` that is none of the above.
      ValueError: `src` and `diff_dst` of different shapes, or sharded over
        different explicit mesh axes along one dimension; a non-scalar
        `beta`; a concrete `beta` that is NaN, infinite or beyond the range
        of the compute dtype (float32, or float64 for float64 data); an
        operand that was donated (deleted) earlier; a `jax.lax.Tolerance`
        that no evaluation meets.

    Examples:
      >>> import jax.numpy as jnp
      >>> from jax_softplus import softplus_backward
      >>> softplus_backward(jnp.array([-1.0, 0.0, 2.0]), jnp.ones(3), beta=2.0)
      Array([0.11920292, 0.5       , 0.98201376], dtype=float32)
      >>> import jax
      >>> highest = jax.lax.AccuracyMode.HIGHEST
      >>> softplus_backward(jnp.float32(-37.118507), jnp.float32(1.0808235e20),
      ...                   beta=1.0000001, accuracy=highest)
      Array(8192., dtype=float32)
    """
    if _dispatch.as_given(src, diff_dst):
        # At the top level: the operands go into the op's jit as they are.
        dtype = _validate.backward_dtype(src, diff_dst)
        beta, hints = _dispatch.eager_beta(
            _validate.unwrap(beta), dtype, False, diff_dst, src
        )
        level = _validate.check_accuracy(accuracy, dtype)
        return _dispatch.eager_backward(src, diff_dst, beta, hints, level)
    *args, weak = _validated(src, diff_dst, beta, accuracy)
    out = _dispatch.backward_call(*args)
    return _compat.weakly_typed(out) if weak else out


def _validated(src, diff_dst, beta, accuracy=None):
    """(src, diff_dst, beta as given, beta checked, hints, accuracy checked,
    weak)."""
    src, diff_dst, beta = map(_validate.unwrap, (src, diff_dst, beta))
    src, diff_dst, weak = _validate.check_operands(src, diff_dst)
    checked, hints = _validate.check_beta(beta, src.dtype, forward=False)
    level = _validate.check_accuracy(accuracy, src.dtype)
    return src, diff_dst, beta, checked, hints, level, weak


def _lower(src, diff_dst, beta=1.0, *, accuracy=None):
    """Lower for any beta: the executable takes beta as an argument.

    Each argument may be a `jax.ShapeDtypeStruct`, as for any jitted
    function; they are checked as arrays of that shape and dtype would be.
    """
    given = (src, diff_dst)
    if any(isinstance(v, jax.ShapeDtypeStruct) for v in (*given, beta)):
        *data, beta = jax.eval_shape(
            functools.partial(_checked_types, accuracy=accuracy),
            *(_as_abstract(v) for v in (*given, beta)),
        )
        # The given specs keep their shardings; the others are checked types.
        src, diff_dst = (
            v if isinstance(v, jax.ShapeDtypeStruct) else c
            for v, c in zip(given, data, strict=True)
        )
        level = _validate.check_accuracy(accuracy, src.dtype)
        return _dispatch.inplace_lower(src, diff_dst, beta, level)
    src, diff_dst, _, checked, _, level, _ = _validated(src, diff_dst, beta, accuracy)
    return _dispatch.inplace_lower(src, diff_dst, checked, level)


def _as_abstract(v):
    """A spec, or a value as an argument of `eval_shape` (Python floats stay
    Python floats, so that they take the data's dtype)."""
    if isinstance(v, (jax.ShapeDtypeStruct, int, float)):
        return v
    return jax.ShapeDtypeStruct(jnp.shape(v), jnp.result_type(v))


def _checked_types(src, diff_dst, beta, *, accuracy=None):
    # Under eval_shape: the checks run on tracers of the specs' types.
    src, diff_dst, _, checked, _, _, _ = _validated(src, diff_dst, beta, accuracy)
    return src, diff_dst, checked


class _InplaceOp(Protocol):
    """What type checkers see of `softplus_backward_inplace`: a function
    with the `.lower` of a jitted function."""

    def __call__(
        self,
        src: ArrayLike,
        diff_dst: ArrayLike,
        beta: ArrayLike = 1.0,
        *,
        accuracy: Accuracy = None,
    ) -> jax.Array: ...

    def lower(
        self, src: Any, diff_dst: Any, beta: Any = 1.0, *, accuracy: Accuracy = None
    ) -> Any: ...


def _with_lower(fun: Callable[..., jax.Array]) -> _InplaceOp:
    """`fun`, given `.lower` (`_lower`), typed so that checkers know it."""
    fun.lower = _lower  # type: ignore[attr-defined]
    return cast(_InplaceOp, fun)


@_with_lower
def softplus_backward_inplace(
    src: ArrayLike,
    diff_dst: ArrayLike,
    beta: ArrayLike = 1.0,
    *,
    accuracy: Accuracy = None,
) -> jax.Array:
    """`softplus_backward` that writes `diff_src` over `diff_dst`.

    This is oneDNN's in-place mode, expressed as buffer donation under
    `jax.jit`: XLA aliases the output to `diff_dst`'s buffer, so no array is
    allocated. On the CPU that also avoids the page faults of a fresh output,
    which cost several times the arithmetic for large arrays.

    After the call `diff_dst` is deleted (`diff_dst.is_deleted()` is true),
    whether it was passed by position or by keyword: use the returned array.
    (The runtime declines to donate a buffer that is still referenced
    elsewhere, such as by a NumPy view from `np.asarray` on the CPU; then a
    `UserWarning` says so, `diff_dst` is unchanged and the result is new.
    So does the op under `jax_debug_nans` or `jax_debug_infs`, which donates
    nothing: JAX re-runs a call that gives a NaN or an inf on its
    arguments.)
    With sharded arrays the result is laid out as `diff_dst`; an uncommitted
    `diff_dst` (such as `jnp.ones(...)`) with a `src` committed to a device or
    sharded is first moved where `src` is, and the moved copy is donated.
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
      accuracy: as in `softplus_backward`. At HIGHEST too, the result is
        written over `diff_dst`, in two passes (the first marks the rare
        elements whose rounding the evaluation leaves in doubt, in a
        bitmap of a bit per element, so that the second leaves their
        `diff_dst` for the step that resolves them), on every platform
        and on each shard of a `NamedSharding` on its own
        (docs/inplace.md). `.lower(...)` compiles what the call runs.

    Returns:
      `diff_src`, in `diff_dst`'s former buffer.

    Raises:
      TypeError, ValueError: as `softplus_backward`, including for a
        `diff_dst` that an earlier call already donated.

    Examples:
      >>> import jax.numpy as jnp
      >>> from jax_softplus import softplus_backward_inplace
      >>> g = jnp.ones(3)
      >>> out = softplus_backward_inplace(jnp.zeros(3), g)
      >>> out, g.is_deleted()
      (Array([0.5, 0.5, 0.5], dtype=float32), True)
    """
    if _dispatch.two_arrays_alike(src, diff_dst):
        # The usual eager call: the operands need no check of their own.
        beta, hints = _dispatch.eager_beta(
            _validate.unwrap(beta), src.dtype, False, diff_dst
        )
        level = _validate.check_accuracy(accuracy, src.dtype)
        return _dispatch.eager_inplace(src, diff_dst, beta, hints, level)
    # An nnx.Param's own array is donated, not a copy of it.
    src, diff_dst, beta = map(_validate.unwrap, (src, diff_dst, beta))
    *args, _ = _validated(src, diff_dst, beta, accuracy)
    if _weak_buffer(diff_dst, args[1]):
        # Its own buffer is donated, not a strongly typed copy: the jit reads
        # a weak array as the float array it is (the result is strong).
        args[0] = diff_dst if src is diff_dst else args[0]
        args[1] = diff_dst
    converted = args[1] is not diff_dst  # a host array, converted here
    return _dispatch.inplace_call(*args, converted=converted)


def _weak_buffer(given, checked):
    """Whether `given` is a live, weakly typed JAX array whose checked form
    differs from it only by the weak type."""
    return (
        isinstance(given, jax.Array)
        and not _compat.is_tracer(given)
        and given.weak_type
        and given.dtype == checked.dtype
    )
