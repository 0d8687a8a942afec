"""Version shims: the one module that knows where JAX moved things.

Tested: jax 0.8.2 and 0.10.2 (Python 3.11), 0.11.2 and 0.12.0.1 (Python
3.13, `.ci/newer-jax.sh`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import jax
from jax.interpreters import batching

try:  # no public equivalent; present from JAX 0.4 to 0.12 at least
    from jax._src.core import trace_state_clean
except ImportError:  # pragma: no cover - future JAX

    def trace_state_clean() -> bool:
        return False  # always the traced path: correct, only slower eagerly


# The impl of JAX's own primitives: compile the one primitive, run it with jit
# re-enabled (disable_jit reaches it op by op), and report a NaN or inf under
# debug_nans/debug_infs as a FloatingPointError naming the primitive instead
# of re-running it. Private, but the only way to get that behaviour.
from jax._src.dispatch import apply_primitive  # noqa: E402, F401
from jax._src.lax import lax as _lax_internal  # noqa: E402

# `jax.core` is a legacy module whose exports JAX keeps trimming; if `Tracer`
# leaves it, the private class is the fallback.
_Tracer = getattr(jax.core, "Tracer", None)
if _Tracer is None:  # pragma: no cover - future JAX
    from jax._src.core import Tracer as _Tracer


def _flag(name: str) -> Callable[[], Any]:
    """A reader of JAX's option `jax_<name>`. Eager calls read a few: the
    config holder's own `.value` takes 0.05-0.10 us, `jax.config.jax_<name>`
    0.09-0.15 us (Zen 4, three runs)."""
    try:
        from jax._src import config

        holder = getattr(config, name)
    except (ImportError, AttributeError):  # pragma: no cover - future JAX
        return lambda: getattr(jax.config, f"jax_{name}")
    return lambda: holder.value


default_device = _flag("default_device")
debug_nans = _flag("debug_nans")
debug_infs = _flag("debug_infs")


# The concrete array class, for the eager paths' one `type(x) is` test
# (an isinstance test of jax.Array also admits tracers). If it moves, those
# tests never match and every call takes the checked path.
try:
    from jax._src.array import ArrayImpl
except ImportError:  # pragma: no cover - future JAX
    ArrayImpl = None


def is_tracer(value: Any) -> bool:
    """Whether `value` is a tracer (abstract under jit/vmap/grad)."""
    return isinstance(value, _Tracer)


def register_batching_rule(prim: Any, rule: Callable) -> None:
    """Register `rule(args, dims, **params) -> (out, out_dim)` for `prim`.

    `batching.primitive_batchers` has been a write-only shim since JAX 0.8.2:
    when no operand is batched it binds `prim` directly and never calls
    `rule`, so `rule` may assume that at least one operand is batched.
    Where the shim is gone, the same wrapper is installed by hand.
    """
    shim = getattr(batching, "primitive_batchers", None)
    if shim is not None:
        shim[prim] = rule
        return

    def wrapped(axis_data, args, dims, **params):
        del axis_data
        if all(d is None for d in dims):
            return prim.bind(*args, **params), None
        return rule(args, dims, **params)

    batching.fancy_primitive_batchers[prim] = wrapped


def varying_axes(aval: Any) -> frozenset:
    """The manual mesh axes over which a value of type `aval` varies.

    Inside `shard_map` with `check_vma`, JAX types each value with the mesh
    axes it varies over (printed `f32[4]{V:d}`); elsewhere the set is empty.
    The attribute moved: `aval.manual_axis_type.varying` from JAX 0.10,
    `aval.vma` before.
    """
    mat = getattr(aval, "manual_axis_type", None)
    if mat is not None:
        return frozenset(mat.varying)
    return frozenset(getattr(aval, "vma", ()))


def _hi_primitive_base() -> type | None:
    """JAX's user-defined primitive with its own derivative rules, where it
    has everything `softplus` needs: reverse mode given by a fwd/bwd pair
    that is told which inputs are perturbed, forward mode (`jvp`, and
    `lin`/`linearized` for `jax.linearize`) and a batching rule of the
    subclass's own. `jax.experimental.hijax.HiPrim` from JAX 0.11,
    `VJPHiPrimitive` before; JAX 0.8's `VJPHiPrimitive` has no `lin` and
    no nonzeros in `vjp_fwd`, so there (and where it is gone) None.
    """
    try:
        from jax.experimental import hijax
    except ImportError:  # pragma: no cover - older or future JAX
        return None
    base = getattr(hijax, "HiPrim", None) or getattr(hijax, "VJPHiPrimitive", None)
    needed = ("expand", "vjp_fwd", "vjp_bwd_retval", "jvp", "lin", "linearized")
    if base is None or not all(hasattr(base, n) for n in needed):
        return None
    if "nzs_in" not in inspect.signature(base.vjp_fwd).parameters:
        return None  # pragma: no cover - JAX 0.8 has no lin either
    if "batch" not in vars(base) or getattr(hijax, "Zero", None) is None:
        return None  # pragma: no cover
    return base


#: The base class of `softplus`'s primitive, or None where `softplus` keeps
#: `jax.custom_vjp` (reverse mode only).
HiPrim = _hi_primitive_base()
#: The symbolic zero tangent and cotangent that HiPrim's rules see.
HiZero = None
if HiPrim is not None:
    from jax.experimental.hijax import Zero as HiZero  # noqa: F401


def register_hi_nan_check(cls: type) -> None:
    """Make `checkify`'s float checks report a NaN made by an instance of
    the HiPrim subclass `cls`; other hi primitives keep JAX's own rule.

    JAX's rule for all of them runs the primitive unchecked. Without the
    private table the op is unchecked, as the others are.
    """
    try:
        from jax._src import checkify
        from jax._src.hijax import call_hi_primitive_p
    except ImportError:  # pragma: no cover - future JAX
        return
    table = getattr(checkify, "error_checks", None)
    check = getattr(checkify, "nan_error_check", None)
    if table is None or check is None or call_hi_primitive_p not in table:
        return  # pragma: no cover
    jax_rule = table[call_hi_primitive_p]

    def rule(error, enabled_errors, *vals, **params):
        if not any(isinstance(p, cls) for p in params.values()):
            return jax_rule(error, enabled_errors, *vals, **params)
        return check(call_hi_primitive_p, error, enabled_errors, *vals, **params)

    table[call_hi_primitive_p] = rule


def in_eager_shard_map() -> bool:
    """Whether the current trace is `shard_map`'s eager interpreter (a
    `shard_map` called outside `jit`), which in JAX 0.8 cannot run a
    `custom_vjp` with symbolic zeros. False where that cannot be told."""
    try:
        from jax._src import core
        from jax._src.shard_map import ShardMapTrace
    except ImportError:  # pragma: no cover - future JAX
        return False
    return isinstance(getattr(core.trace_ctx, "trace", None), ShardMapTrace)


def weakly_typed(x: Any) -> Any:
    """`x` as a weakly typed value of its dtype (as Python scalars promote).
    No public API makes one; this is what `jnp` functions do."""
    return _lax_internal._convert_element_type(x, x.dtype, weak_type=True)


def register_nan_check(prim: Any) -> None:
    """Make `checkify`'s float checks report a NaN in `prim`'s output.

    `checkify` checks only the primitives in its own table; the rule is the
    one that JAX's elementwise primitives (`lax.mul_p`, `lax.div_p`...) use.
    Without the private table (a future JAX), the op is unchecked, as before.
    """
    try:
        from jax._src import checkify
    except ImportError:  # pragma: no cover - future JAX
        return
    table = getattr(checkify, "error_checks", None)
    rule = getattr(checkify, "nan_error_check", None)
    if table is not None and rule is not None:
        table[prim] = functools.partial(rule, prim)
