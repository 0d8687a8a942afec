"""Input checks and dtype policy, applied once at the public boundary.

Everything here runs at trace time, on shapes and dtypes (and on the value
of a concrete beta), so the same error is raised eagerly and under `jit`,
`vmap` and `grad`.
"""

from __future__ import annotations

import math
import numbers
import weakref
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jax_softplus import _compat

_HALF = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
_F32 = jnp.dtype(jnp.float32)
_F64 = jnp.dtype(jnp.float64)
# The dtypes of oneDNN's SoftPlusBackward (and float64), whatever the x64
# setting: what `softplus_backward` takes.
ALL_DATA_DTYPES = frozenset((_F32, *_HALF, _F64))


def kernel_dtype(dtype: Any) -> bool:
    """Whether the kernels take data of this dtype: every float dtype, the
    narrow ones (float8, float4) computed in float32 and rounded once, as
    bfloat16 and float16 are (`softplus`'s gradient binds the primitive on
    them; `softplus_backward` itself keeps oneDNN's dtypes)."""
    return bool(jnp.issubdtype(dtype, jnp.floating))


def data_dtypes() -> tuple[np.dtype, ...]:
    """The accepted data dtypes under the current x64 setting."""
    base = (_F32, *_HALF)
    return (*base, _F64) if jax.config.jax_enable_x64 else base


def _accepted(promote: bool = False) -> str:
    names = ", ".join(d.name for d in data_dtypes())
    return f"{names}, float8, float4, integer, bool or complex" if promote else names


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype the math runs in: float64 for float64 data, else float32."""
    return _F64 if dtype == _F64 else _F32


def unwrap(value: Any) -> Any:
    """What JAX takes as an array through `__jax_array__` (flax's
    `nnx.Param`, for one), as that array; any other value as it is."""
    if type(value) is float or isinstance(value, jax.Array):
        return value
    to_array = getattr(type(value), "__jax_array__", None)
    return value if to_array is None else to_array(value)


def _is_python_scalar(value: Any) -> bool:
    return type(value) in (int, float)


def check_live(name: str, value: Any) -> None:
    """A ValueError naming `name` where `value` is a deleted JAX array."""
    if (
        isinstance(value, jax.Array)
        and not _compat.is_tracer(value)
        and value.is_deleted()
    ):
        raise ValueError(
            f"{name} is a deleted array: its buffer was donated to an "
            "earlier call (a jax.jit with donate_argnums, or "
            "softplus_backward_inplace, which donates diff_dst). Pass a "
            "live array."
        )


def _dtype_of(name: str, value: Any, *, promote: bool = False) -> np.dtype:
    """The canonical dtype `value` would have as a JAX array, or an error.

    With `promote`, integer and bool dtypes are accepted too (the caller
    promotes them, as `jax.nn.softplus` does).
    """
    if isinstance(value, jax.Array):
        check_live(name, value)
        dtype = value.dtype
    elif isinstance(value, (np.ndarray, np.generic)):
        dtype = value.dtype
    elif isinstance(value, (list, tuple)):
        dtype = sequence_array(name, value).dtype
    else:
        raise TypeError(
            f"{name} must be an array of dtype {_accepted(promote)}, got "
            f"{type(value).__name__} {value!r:.60}."
        )
    dtype = np.dtype(dtype)
    if promote and _promotes(dtype):
        return jax.dtypes.canonicalize_dtype(dtype)
    if promote and not kernel_dtype(dtype):
        raise TypeError(
            f"{name} has dtype {dtype}; softplus accepts {_accepted(True)} "
            "(integers and bools promote to the default float dtype, as in "
            "jax.nn.softplus)."
        )
    if not promote and dtype not in ALL_DATA_DTYPES:
        narrow = (
            " (float8 and float4 data: softplus takes them, and its gradient; "
            "this op keeps oneDNN's SoftPlusBackward dtypes)"
            if kernel_dtype(dtype)
            else ""
        )
        raise TypeError(
            f"{name} has dtype {dtype}; softplus_backward accepts {_accepted()} "
            f"and does not promote other dtypes{narrow} (cast explicitly, e.g. "
            "x.astype(jnp.float32))."
        )
    # float64 becomes float32 unless x64 is on, as everywhere in JAX.
    return jax.dtypes.canonicalize_dtype(dtype)


def _promotes(dtype: np.dtype) -> bool:
    # bool, signed and unsigned, int4 and int2 included (a NumPy kind of "V")
    return dtype == np.bool_ or bool(jnp.issubdtype(dtype, jnp.integer))


def _promoted(dtype: np.dtype, weak: bool) -> tuple[np.dtype, bool]:
    """The dtype and weak type that `jax.nn.softplus` gives an integer or
    bool input: JAX's own promotion, read off `jnp.logaddexp(x, 0)` (at
    trace time only: an eager call checks its x inside the op's jit)."""
    spec = jax.ShapeDtypeStruct((), dtype, weak_type=weak)
    # Standard promotion: under "strict", jax.nn.softplus refuses bools only
    # for the literal 0 it adds; one operand promotes to inexact in any mode.
    with jax.numpy_dtype_promotion("standard"):
        out = jax.eval_shape(lambda v: jnp.logaddexp(v, 0), spec)
    return np.dtype(out.dtype), bool(out.weak_type)


def is_weak(value: Any) -> bool:
    """Whether `value` is weakly typed (a Python scalar, or a JAX value
    derived from one), as JAX's promotion rules define it. A NumPy scalar is
    strongly typed, though `np.float64` subclasses `float`."""
    if type(value) in (bool, int, float, complex):
        return True
    # An attribute of arrays and tracers alike: no aval is built.
    return isinstance(value, jax.Array) and value.weak_type


# Dtypes that need no conversion under any x64 setting.
_AS_IS = frozenset((_F32, *_HALF))


def _usable(value: Any) -> bool:
    """A strongly typed, live float32/bfloat16/float16 array: taken as is."""
    return (
        isinstance(value, jax.Array)
        and value.dtype in _AS_IS
        and not value.weak_type
        and (_compat.is_tracer(value) or not value.is_deleted())
    )


def is_complex(value: Any) -> bool:
    """Whether `softplus`'s x is complex (a Python complex, or an array or
    scalar of a complex dtype), which it computes as `jax.nn.softplus` does."""
    if isinstance(value, complex):
        return True
    dtype = getattr(value, "dtype", None)
    return dtype is not None and np.dtype(dtype).kind == "c"


def check_forward_operand(value: Any) -> tuple[jax.Array, bool]:
    """`softplus`'s real x as a strongly typed float array, and whether the
    result is weakly typed: what `jax.nn.softplus` accepts, with its
    promotion (complex x: `is_complex`, handled before)."""
    if _usable(value):
        return value, False  # the common case, in a fraction of a microsecond
    weak = is_weak(value)
    if isinstance(value, (bool, int, float)):
        value = jnp.asarray(value)  # weakly typed, of the default dtype
    dtype = _dtype_of("x", value, promote=True)
    if _promotes(dtype):
        dtype, weak = _promoted(dtype, weak)
    return _as_strong(value, dtype), weak


def forward_dtype(value: Any) -> np.dtype:
    """The dtype `check_forward_operand` gives a real x, read off its type
    and dtype without converting it (or the error `_dtype_of` raises)."""
    if _usable(value):
        return value.dtype
    if isinstance(value, (bool, int, float)):
        dtype = jax.dtypes.canonicalize_dtype(type(value))
    else:
        dtype = _dtype_of("x", value, promote=True)
    if _promotes(dtype):
        # `_promoted`'s dtype for every integer and bool (its weak type
        # differs for bool; int4 and int2 fail there, in the op's jit).
        return jax.dtypes.canonicalize_dtype(float)
    return dtype


def backward_dtype(src: Any, diff_dst: Any) -> np.dtype:
    """The dtype `check_operands` gives the data, read off the operands'
    dtypes: the first that is not a Python scalar's, else the default float
    dtype. (What is wrong with them, the checks themselves say.)"""
    for value in (src, diff_dst):
        if type(value) is _compat.ArrayImpl:
            return value.dtype  # canonical already
        if not _is_python_scalar(value):
            return jax.dtypes.canonicalize_dtype(value.dtype)
    return jax.dtypes.canonicalize_dtype(float)


def _as_strong(value: Any, dtype: np.dtype) -> jax.Array:
    if isinstance(value, jax.Array) and value.dtype == dtype:
        if not value.weak_type:
            return value  # the common case: no conversion, no copy
        return jax.lax.convert_element_type(value, dtype)
    return jnp.asarray(value, dtype)


def sequence_array(name: str, value: list | tuple) -> Any:
    """A (nested) list or tuple as one array (NumPy's, or JAX's where NumPy
    cannot hold its elements), or an error naming `name`."""
    try:
        return np.asarray(value)
    except ValueError as err:  # ragged nesting
        raise ValueError(
            f"{name} is a nested sequence that is not rectangular ({err}); "
            "pass an array."
        ) from None
    except TypeError:  # NumPy cannot hold some JAX elements (bfloat16 arrays)
        pass
    try:
        return jnp.asarray(value)
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"{name} is a {type(value).__name__} that does not convert to one "
            f"array ({err}); pass an array of dtype {_accepted()}."
        ) from None


def check_operand(name: str, value: Any, dtype: np.dtype | None = None) -> jax.Array:
    """Check one data operand and return it as a strongly typed JAX array.

    A Python float takes `dtype` (the other operand's), else the default
    float dtype.
    """
    if _is_python_scalar(value):
        target = dtype if dtype is not None else jax.dtypes.canonicalize_dtype(float)
        return jnp.asarray(value, target)
    return _as_strong(value, _dtype_of(name, value))


def check_operands(src: Any, diff_dst: Any) -> tuple[jax.Array, jax.Array, bool]:
    """Check `src` and `diff_dst`: one float dtype, one shape. Also returns
    whether both are weakly typed (then so is the result)."""
    if (
        _usable(src)
        and _usable(diff_dst)
        and src.dtype == diff_dst.dtype
        and src.shape == diff_dst.shape
    ):
        return src, diff_dst, False  # the common case
    weak = is_weak(src) and is_weak(diff_dst)
    if _is_python_scalar(src) and not _is_python_scalar(diff_dst):
        diff_dst = check_operand("diff_dst", diff_dst)
        src = check_operand("src", src, diff_dst.dtype)
    else:
        src = check_operand("src", src)
        diff_dst = check_operand("diff_dst", diff_dst, src.dtype)
    if src.dtype != diff_dst.dtype:
        raise TypeError(
            f"src and diff_dst must have one dtype, got src {src.dtype} and "
            f"diff_dst {diff_dst.dtype}; cast one of them (oneDNN's "
            "SoftPlusBackward takes f32/f32, bf16/bf16 or f16/f16)."
        )
    if src.shape != diff_dst.shape:
        raise ValueError(
            f"src and diff_dst must have one shape, got src {src.shape} and "
            f"diff_dst {diff_dst.shape}; there is no broadcasting, as in oneDNN."
        )
    return src, diff_dst, weak


def _is_real_dtype(dtype: Any) -> bool:
    dtype = np.dtype(dtype)
    return dtype != np.bool_ and (
        jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)
    )


class BetaHints(NamedTuple):
    """What a concrete beta tells the lowering at trace time; all False for
    a traced beta. They are the primitive's parameters and change no bit of
    the result for a finite src, only which steps the kernel may skip (or,
    for `beta_tiny`, add)."""

    # beta * x is exact (beta is a power of two, or 0): no error-free product.
    beta_exact: bool = False
    # |beta| is in [2**-64, 2**64] (or 0): no rebalancing of beta and x.
    beta_moderate: bool = False
    # 0 < |beta| < 2**-100: the fused float32 backward kernel rescales the
    # pair (beta 2**64, src 2**-64), the same products, so that an infinite
    # src still reaches the saturated t below |beta| = 5.4e-37, where a
    # traced beta's clamp cannot (`_math._exp_reduce_fused`).
    beta_tiny: bool = False
    # Finite (every concrete beta is, or it is refused): the fused float32
    # kernel needs no select for an infinite traced beta's limits.
    beta_finite: bool = False


def beta_number(value: Any) -> float | None:
    """A Python float or int or a NumPy real scalar `beta` as the float it
    checks as (the same errors and bits); None for any other beta."""
    if type(value) is float:
        return value
    if type(value) is int or isinstance(value, (np.floating, np.integer)):
        number = value if type(value) is int else value.item()
        if type(number) in (int, float) and abs(number) < 2**1000:
            return float(number)
    return None


def check_beta(
    value: Any, data_dtype: np.dtype, *, forward: bool
) -> tuple[jax.Array | np.ndarray, BetaHints]:
    """Check `beta` and return it as a 0-d array (NumPy if concrete) of the
    compute dtype, with the `BetaHints` that its value allows.
    """
    cdtype = compute_dtype(data_dtype)
    number = beta_number(value)
    if number is not None:
        return _concrete_beta(number, f"{number!r}", cdtype, forward)
    if isinstance(value, (list, tuple)):
        value = np.asarray(value)
    if isinstance(value, (jax.Array, np.ndarray, np.generic)):
        if not _is_real_dtype(value.dtype):
            raise TypeError(
                f"beta must be a real scalar, got an array of dtype {value.dtype}."
            )
        if value.ndim != 0:
            raise ValueError(
                f"beta must be a scalar (0-d), got shape {value.shape}; for a "
                "per-example beta, jax.vmap over a scalar beta."
            )
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            "beta must be a real scalar (a Python int or float, or a 0-d integer "
            "or float array), "
            f"got {type(value).__name__} {value!r:.60}."
        )
    if _compat.is_tracer(value):
        return value.astype(cdtype), BetaHints()
    if isinstance(value, jax.Array):
        return _array_beta(value, cdtype, forward)
    try:
        concrete = float(np.asarray(value, np.float64))
        shown = f"{concrete!r}"
    except OverflowError:  # a Python int beyond float64
        concrete = np.inf if value > 0 else -np.inf
        shown = f"an integer of {len(str(abs(value)))} digits"
    return _concrete_beta(concrete, shown, cdtype, forward)


# Concrete device betas, by identity. Arrays are immutable, so each is read
# back (a scalar transfer, which waits for the array) and checked once, not
# on every call that passes it.
_ARRAY_BETAS: dict = {}


def _array_beta(value, cdtype, forward):
    if value.is_deleted():
        raise ValueError(
            "beta is a deleted array: its buffer was donated to an earlier "
            "call. Pass a live array or a Python float."
        )
    key = (id(value), cdtype, forward)
    hit = _ARRAY_BETAS.get(key)
    if hit is not None and hit[0]() is value:
        return hit[1]
    # A deliberate read, so allowed under any transfer guard. Not through
    # jax.device_get or float(): on the CPU, JAX 0.11 then keeps a NumPy view
    # on the array, which would keep a later jit from donating it.
    with jax.transfer_guard_device_to_host("allow"):
        concrete = float(np.asarray(value, np.float64))
    result = _concrete_beta(concrete, f"{concrete!r}", cdtype, forward)
    # Dropped with the array, before its id can be reused.
    _ARRAY_BETAS[key] = (
        weakref.ref(value, lambda _, key=key: _ARRAY_BETAS.pop(key, None)),
        result,
    )
    return result


# The largest and the smallest normal value of each compute dtype.
_RANGE = {d: (float(np.finfo(d).max), float(np.finfo(d).tiny)) for d in (_F32, _F64)}


def _concrete_beta(concrete, shown, cdtype, forward):
    limit, tiny = _RANGE[cdtype]
    if not math.isfinite(concrete) or abs(concrete) > limit:
        raise ValueError(
            f"beta must be finite and representable in {cdtype.name} "
            f"(|beta| <= {limit:.4g}), got {shown}."
        )
    # The value the kernels see: a float64 beta a hair below `tiny` rounds to
    # it, a normal number, as a traced beta's conversion rounds it.
    concrete = float(np.asarray(concrete, cdtype))
    if forward and abs(concrete) < tiny:
        flushed = "" if concrete == 0.0 else (
            f" (below {cdtype.name}'s smallest normal, {tiny:.4g}: a subnormal "
            "or smaller beta is flushed to 0)"
        )  # fmt: skip
        raise ValueError(
            f"softplus with beta = {shown}{flushed} diverges: (1/beta) "
            "log(1 + exp(beta x)) -> inf. Use a nonzero beta. softplus_backward "
            "accepts beta = 0 and returns 0.5 * diff_dst."
        )
    if abs(concrete) < tiny:
        # XLA on CPU flushes subnormals to zero; do it here, everywhere.
        concrete = 0.0
    checked = np.asarray(concrete, cdtype)  # host scalar: no device transfer yet
    checked.flags.writeable = False  # remembered for a device array beta
    mantissa = math.frexp(concrete)[0]
    exact = bool(mantissa == 0.0 or abs(mantissa) == 0.5)
    moderate = concrete == 0.0 or 2.0**-64 <= abs(concrete) <= 2.0**64
    tiny = 0.0 < abs(concrete) < 2.0**-100
    return checked, BetaHints(exact, bool(moderate), tiny, beta_finite=True)


# accuracy= -----------------------------------------------------------------

#: What `accuracy=` takes (as `jax.lax`'s unary functions do).
Accuracy = jax.lax.AccuracyMode | jax.lax.Tolerance | None

# The evaluations `accuracy` chooses between, and the bound each is proven to
# (docs/accuracy.md), in ulps of the exact value: "highest" is correctly
# rounded (half an ulp) for float32, bfloat16 and float16; float64 (and
# float8/float4, computed in float32) data take the default evaluation at
# either setting.
_EVALUATIONS = ("default", "highest")
_BOUNDS = {
    _F32: {"default": 2.5, "highest": 0.5},
    jnp.dtype(jnp.bfloat16): {"default": 1.5, "highest": 0.5},
    jnp.dtype(jnp.float16): {"default": 1.5, "highest": 0.5},
    _F64: {"default": 1.0},
}
HIGHEST_DTYPES = frozenset((_F32, *_HALF))


def check_accuracy(value: Any, data_dtype: Any) -> str | None:
    """`accuracy` as the primitive's parameter: None for the default
    evaluation, "highest" for the correctly rounded one.

    None and `lax.AccuracyMode.DEFAULT` are the default; `HIGHEST` is the
    correctly rounded evaluation where the data dtype has one (float32,
    bfloat16, float16), the default elsewhere (float64: within 1 ulp); a
    `lax.Tolerance` is the cheapest evaluation whose bound meets it.
    """
    if value is None:
        return None
    mode = jax.lax.AccuracyMode
    dtype = np.dtype(data_dtype)
    if isinstance(value, mode):
        if value == mode.HIGHEST and dtype in HIGHEST_DTYPES:
            return "highest"
        return None
    if isinstance(value, jax.lax.Tolerance):
        return _meeting(value, dtype)
    raise TypeError(
        "accuracy must be None, jax.lax.AccuracyMode.DEFAULT or "
        "jax.lax.AccuracyMode.HIGHEST, or a jax.lax.Tolerance, got "
        f"{type(value).__name__} {value!r:.60}."
    )


def _meeting(tolerance: Any, dtype: np.dtype) -> str | None:
    """The cheapest evaluation whose bound meets `tolerance` for `dtype`."""
    # float8 and float4 (softplus computes them in float32 and rounds once):
    # within 1.5 ulp of their own.
    bounds = _BOUNDS.get(dtype, {"default": 1.5})
    eps = float(jnp.finfo(dtype).eps)  # an ulp is at most eps relative
    ulps, rtol = float(tolerance.ulps), float(tolerance.rtol)
    if ulps == 0 and rtol == 0:
        raise ValueError(
            f"accuracy={_shown(tolerance)}: an atol alone cannot be met, the "
            "ops' errors are relative to their results; give ulps or rtol."
        )
    for name in _EVALUATIONS:
        bound = bounds.get(name)
        if bound is None:
            continue
        if (ulps and bound <= ulps) or (rtol and bound * eps <= rtol):
            return "highest" if name == "highest" else None
    offered = ", ".join(
        f"{name} ({bound:g} ulp, rtol {bound * eps:.3g})"
        for name, bound in bounds.items()
    )
    raise ValueError(
        f"accuracy={_shown(tolerance)}: no evaluation of {dtype.name} data is "
        f"that accurate; available: {offered}."
    )


def _shown(tolerance: Any) -> str:
    return (
        f"Tolerance(atol={tolerance.atol!r}, rtol={tolerance.rtol!r}, "
        f"ulps={tolerance.ulps!r})"
    )
