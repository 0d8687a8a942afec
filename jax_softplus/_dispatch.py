"""Dispatch: where a validated call runs, and where its beta lives.

Three ways in, one primitive:

- **Traced** (inside `jit`, `vmap`, `grad`, `scan`, `checkify`, ..., or on
  arrays closed over by one): the op binds `softplus_backward_p` (or traces
  the forward kernel) into the surrounding computation.
- **Eager, at the top level**: the op runs one of the library's own jits,
  compiled with 512-bit CPU vectors, with `beta` as an argument on the device
  beside the data. This skips the Python of `bind` and JAX's dispatch:
  16 us a call at 1K elements against 35 us through `apply_primitive` and
  51 us through `bind` (docs/primitive.md, "Dispatch").
- **The primitive's impl** (a direct `bind`, `disable_jit`, the op-by-op
  re-run of `debug_nans`, eager transformations): JAX's own
  `apply_primitive`, as for `lax.mul`. Under `debug_nans` it reports a NaN
  as `FloatingPointError: invalid value (nan) encountered in
  softplus_backward`, and it never re-enters the library's jits.

A concrete beta's `BetaHints` (is `beta * x` exact? is `|beta|` moderate?)
choose which steps the float32 kernel may skip. They reach only the eager
executables, which are looked up by them on every call; anything handed to
a user (`softplus_backward_inplace.lower`) is compiled without them, for
any beta.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_softplus import _compat, _kernels, _sharding
from jax_softplus._primitive import bind
from jax_softplus._validate import BetaHints

# On AVX-512 CPUs XLA vectorises float32 loops 256 bits wide by default; 512
# bits ran the float32 kernel at 1.5x instead of 2.2-2.4x the donated a*b
# floor on an AMD Zen 4 (bfloat16 1.8x against 1.9x, float16 equal), with
# identical bits. A CPU option that other backends ignore.
_WIDE_VECTORS = {"xla_cpu_prefer_vector_width": 512}

#: XLA:CPU compiler options for a user's own `jax.jit` around the op
#: (`jax.jit(step, compiler_options=TUNED_CPU_OPTIONS)`; JAX refuses compiler
#: options on nested jits). 512-bit vectors, as the library's own jits use,
#: and region analysis, which lets copy insertion order a donated input's
#: last reader before the op that overwrites it instead of copying the input.
#: Both are XLA debug options, not a stable API; other backends ignore them.
TUNED_CPU_OPTIONS = {
    "xla_cpu_copy_insertion_use_region_analysis": True,
    **_WIDE_VECTORS,
}


def own_jit(fun, **jit_kwargs):
    """`jax.jit` for the library's top-level calls, with wide CPU vectors."""
    return jax.jit(fun, compiler_options=_WIDE_VECTORS, **jit_kwargs)


def is_eager(*values: Any) -> bool:
    """Whether a call on `values` runs at the top level, outside any trace.

    Arrays that a function being traced by `jit`, `scan` or `cond` closes
    over are concrete, not tracers, yet the call belongs to that trace: the
    library's own jits (compiler options, donation) must not run there.
    """
    return not any(map(_compat.is_tracer, values)) and _compat.trace_state_clean()


def call(eager, traced, data: tuple, beta: Any, checked: Any, hints: BetaHints):
    """Run an op on validated operands.

    At the top level `eager(*data, placed_beta, hints=hints)`, one of the
    library's own jits; inside a trace `traced(*data, checked, hints)`.
    `beta` is what the caller passed, `checked` its validated value.
    """
    if is_eager(*data, checked):
        return eager(*data, place_beta(beta, checked, data[-1]), hints=hints)
    return traced(*data, checked, hints)


backward = own_jit(bind, static_argnames=("hints",))


def backward_call(src, diff_dst, beta, checked, hints):
    """`softplus_backward` on validated operands."""
    return call(backward, bind, (src, diff_dst), beta, checked, hints)


# In place --------------------------------------------------------------------


def _inplace(src, diff_dst, beta, hints, layout=None):
    out = bind(src, diff_dst, beta, hints)
    if layout is not None:
        # The result must be laid out as diff_dst for XLA to reuse its buffer;
        # left to itself it may follow src's sharding and allocate.
        out = _sharding.constrain(out, layout)
    return out


_inplace_jit = own_jit(
    _inplace, donate_argnames=("diff_dst",), static_argnames=("hints", "layout")
)


def _inplace_self(diff_dst, beta, hints):
    return _inplace(diff_dst, diff_dst, beta, hints)


# One array as both operands: the runtime refuses to donate a buffer that the
# same call also reads as another argument, so the kernel reads its one
# (donated) argument twice. Still in place: each element is read, then written.
_inplace_self_jit = own_jit(
    _inplace_self, donate_argnames=("diff_dst",), static_argnames=("hints",)
)


def _same_layout(a, b):
    return a.sharding == b.sharding or a.sharding.is_equivalent_to(b.sharding, a.ndim)


def _layout(src, diff_dst):
    """diff_dst's sharding where src is laid out otherwise, else None.

    Only a committed diff_dst chooses the layout; an uncommitted one follows
    src (`_follow_src`).
    """
    # A jax.ShapeDtypeStruct (for .lower) is committed where it names a layout.
    committed = getattr(diff_dst, "committed", diff_dst.sharding is not None)
    if not committed or src.sharding is None or _same_layout(diff_dst, src):
        return None
    return diff_dst.sharding


def _follow_src(src, diff_dst):
    """diff_dst, moved to src's placement where only src chose one.

    An uncommitted diff_dst (a NumPy array's copy, or `jnp.ones(...)`)
    follows a committed src into a jit anyway; moved first, it is the moved
    buffer that is donated, and the result is laid out as src, as the plain
    op's is.
    """
    if not src.committed or diff_dst.committed or _same_layout(diff_dst, src):
        return diff_dst
    moved = jax.device_put(diff_dst, src.sharding)
    diff_dst.delete()  # its content now lives in `moved`, donated below
    return moved


def inplace_call(src, diff_dst, beta, checked, hints, *, converted=False):
    """`softplus_backward_inplace` on validated operands.

    `converted`: diff_dst is the library's own conversion of a host array.
    On the CPU `jnp.asarray` may share an aligned NumPy array's memory,
    which the runtime will not donate, so an eager call copies it first.
    """
    if not is_eager(src, diff_dst, checked):
        # Under an outer jit/vmap/grad (closed-over arrays included) there is
        # no buffer to donate: the outer computation owns its buffers (donate
        # its arguments instead).
        return bind(src, diff_dst, checked, hints)
    if converted:
        diff_dst = jnp.array(diff_dst, copy=True)
    # Never diff_dst itself (a 0-d one): a donated buffer cannot be read too.
    placed = place_beta(None if beta is diff_dst else beta, checked, diff_dst)
    if src is diff_dst:
        out = _inplace_self_jit(diff_dst, placed, hints=hints)
    else:
        diff_dst = _follow_src(src, diff_dst)
        out = _inplace_jit(
            src, diff_dst, placed, hints=hints, layout=_layout(src, diff_dst)
        )
    if not diff_dst.is_deleted():
        _warn_not_donated()
    return out


def _warn_not_donated():
    if jax.config.jax_disable_jit:
        return  # documented: nothing is donated without jit
    if jax.config.jax_debug_nans:
        cause = (
            "jax_debug_nans is on, and JAX compiles donating functions "
            "without donation under it"
        )
    else:
        # The runtime declines, silently, to donate a buffer that something
        # else still references.
        cause = (
            "its buffer is still referenced elsewhere (a NumPy view from "
            "np.asarray, for one)"
        )
    warnings.warn(
        f"softplus_backward_inplace could not donate diff_dst: {cause}, so "
        "the result is a new array and diff_dst is unchanged.",
        stacklevel=3,
    )


def inplace_lower(src, diff_dst, checked):
    """`softplus_backward_inplace.lower`: compiled for any beta (no hints)."""
    return _inplace_jit.lower(
        src, diff_dst, checked, hints=BetaHints(), layout=_layout(src, diff_dst)
    )


forward = own_jit(_kernels.softplus_kernel, static_argnames=("hints",))


def forward_call(x, beta, checked, hints, traced):
    """`softplus` on validated operands; `traced` is its custom_vjp."""
    return call(forward, traced, (x,), beta, checked, hints)


def cache_sizes() -> dict[str, int]:
    """Executables held by the library's own jits, by name (for tests)."""
    jits = {
        "backward": backward,
        "forward": forward,
        "inplace": _inplace_jit,
        "inplace_self": _inplace_self_jit,
    }
    return {name: f._cache_size() for name, f in jits.items()}


# Beta beside the data --------------------------------------------------------


def _scalar_sharding(sharding: Any) -> Any:
    """Where a scalar operand of an op on data laid out as `sharding` goes:
    the same device, or replicated over the same mesh; None otherwise."""
    if isinstance(sharding, jax.sharding.SingleDeviceSharding):
        return sharding
    if isinstance(sharding, jax.sharding.NamedSharding):
        return jax.sharding.NamedSharding(
            sharding.mesh,
            jax.sharding.PartitionSpec(),
            memory_kind=sharding.memory_kind,
        )
    return None


# A copy of each beta value per placement, made once: a host scalar would be
# copied on every call (about 28 us against 0.7 us for the lookup, measured
# on an AMD EPYC Zen 4, jax 0.10.2), and that implicit transfer is an error
# under jax.transfer_guard("disallow"), which JAX's own ops pass.
@functools.lru_cache(maxsize=256)
def _placed(value: float, dtype: np.dtype, sharding: Any) -> jax.Array:
    host = np.asarray(value, dtype)
    if isinstance(sharding, jax.sharding.SingleDeviceSharding):
        # Uncommitted, as a host scalar is: the result is then committed to
        # the device only if the data is.
        with jax.default_device(next(iter(sharding.device_set))):
            return jax.device_put(host)
    return jax.device_put(host, sharding)


def place_beta(given: Any, checked: np.ndarray, data: jax.Array) -> Any:
    """The validated beta of an eager call, as an array where `data` lives.

    `given` itself when it is a device array of the checked dtype beside the
    data (and not a subnormal that the check flushed to 0); any other beta is
    copied there once per value, explicitly, and kept. `checked` comes back
    only for data whose layout names no mesh.
    """
    sharding = _scalar_sharding(data.sharding)
    if sharding is None:
        return checked
    if (
        isinstance(given, jax.Array)
        and given.dtype == checked.dtype
        and given.sharding == sharding
        and checked != 0
    ):
        return given
    return _placed(float(checked), checked.dtype, sharding)
