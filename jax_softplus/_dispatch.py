"""Dispatch: where a validated call runs, and where its beta lives.

Two ways in, one primitive:

- **Traced** (inside `jit`, `vmap`, `grad`, `scan`, `checkify`, ..., or on
  arrays closed over by one): the op binds `softplus_backward_p` (or traces
  the forward kernel) into the surrounding computation.
- **Eager, at the top level**: the op runs one `jax.jit` per op, compiled
  with 512-bit CPU vectors, in one device call, as `jax.nn.softplus` does.
  JAX's own dispatch converts host values and keys its cache by dtype,
  shape, layout and weak type; the checks of the data run on its tracers,
  once per such key. `beta` is checked on the host (its value decides the
  errors and the `BetaHints`, static arguments of the jit) and passed
  beside the data, already on the device.

A direct `bind`, `disable_jit`, the op-by-op re-run of `debug_nans` and eager
transformations take JAX's own `apply_primitive`, as for `lax.mul`. Under
`debug_nans` it reports a NaN as `FloatingPointError: invalid value (nan)
encountered in softplus_backward`, and it never re-enters the library's
jits.
"""

from __future__ import annotations

import functools
import types
import warnings
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_softplus import _compat, _forward, _sharding, _validate
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
#: Read-only: `dict(TUNED_CPU_OPTIONS, **more)` makes a copy to extend.
TUNED_CPU_OPTIONS: Mapping[str, Any] = types.MappingProxyType(
    {"xla_cpu_copy_insertion_use_region_analysis": True, **_WIDE_VECTORS}
)


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


def as_given(*values: Any) -> bool:
    """Whether an eager call may pass `values` into its jit as they are: live
    JAX arrays, NumPy arrays and scalars of a real dtype, and Python ints
    and floats, at the top level. JAX converts the host ones; the checks
    run on the tracers. A complex JAX array passes too: `softplus`'s
    default jit computes it (`_default_forward`), its beta route sends it to
    `_complex`, and the backward ops' checks refuse it. Anything else is
    checked and converted first."""
    for v in values:
        kind = type(v)
        if kind is _compat.ArrayImpl:
            # No dtype test: 0.1 us of a 5 us scalar call (Zen 4).
            if v.is_deleted():
                return False  # the checks' error
        elif kind is not float and kind is not int:
            if not isinstance(v, (np.ndarray, np.generic)):
                return False
            dtype = v.dtype
            if dtype.kind not in "biuf" and dtype not in _validate.ALL_DATA_DTYPES:
                # Complex, strings, ...: the checks name the dtype given
                # (JAX would convert complex128 to complex64 first).
                return False
    return _compat.trace_state_clean()


def two_arrays_alike(src: Any, diff_dst: Any) -> bool:
    """Whether `src` and `diff_dst` are two live, strongly typed JAX arrays
    of one dtype that the op takes, one shape and one layout, on two
    buffers, at the top level: what `check_operands` would take as they
    are, and what `inplace_call` runs without moving or relaying out."""
    if type(src) is not _compat.ArrayImpl or type(diff_dst) is not _compat.ArrayImpl:
        return False
    aval = diff_dst.aval  # dtype, shape and weak type in one comparison
    return (
        src is not diff_dst
        and not aval.weak_type
        and src.aval == aval
        and aval.dtype in _validate.ALL_DATA_DTYPES
        and not src.is_deleted()
        and not diff_dst.is_deleted()
        and (src.sharding is diff_dst.sharding or src.sharding == diff_dst.sharding)
        and not _one_buffer(src, diff_dst)
        and _compat.trace_state_clean()
    )


# Eager calls ---------------------------------------------------------------


def _eager_forward(x, beta, *, hints, accuracy):
    """softplus of x as given, beta checked: the eager jit's body."""
    x, weak = _validate.check_forward_operand(x)
    beta = jax.lax.convert_element_type(beta, _validate.compute_dtype(x.dtype))
    out = _forward.value(x, beta, hints, accuracy)
    return _compat.weakly_typed(out) if weak else out


def _eager_backward(src, diff_dst, beta, *, hints, accuracy):
    """softplus_backward of the operands as given: the eager jit's body."""
    src, diff_dst, weak = _validate.check_operands(src, diff_dst)
    beta = jax.lax.convert_element_type(beta, _validate.compute_dtype(src.dtype))
    out = bind(src, diff_dst, beta, hints, accuracy)
    return _compat.weakly_typed(out) if weak else out


_STATIC = ("hints", "accuracy")
_FORWARD = own_jit(_eager_forward, static_argnames=_STATIC)
_BACKWARD = own_jit(_eager_backward, static_argnames=_STATIC)


def _default_forward(x):
    """softplus(x) at the default beta and accuracy."""
    if _validate.is_complex(x):
        return jax.nn.softplus(x)  # as `_softplus._complex` at beta 1
    dtype = _validate.forward_dtype(x)
    checked, hints = _validate.check_beta(1.0, dtype, forward=True)
    return _eager_forward(x, checked, hints=hints, accuracy=None)


# `softplus(x)` as `jax.nn.softplus(x)` is: one jit of x alone (each argument
# costs the dispatch about a microsecond; the kernels read beta behind a
# barrier, so a constant one gives a passed one's bits).
DEFAULT_FORWARD = own_jit(_default_forward)


def eager_forward(x, beta, hints, accuracy=None):
    """`softplus` at the top level, for an `x` that `as_given` takes and a
    beta from `eager_beta`."""
    return _FORWARD(x, beta, hints=hints, accuracy=accuracy)


def eager_backward(src, diff_dst, beta, hints, accuracy=None):
    """`softplus_backward` at the top level, for operands that `as_given`
    takes and a beta from `eager_beta`."""
    return _BACKWARD(src, diff_dst, beta, hints=hints, accuracy=accuracy)


def forward_call(x, beta, checked, hints, traced, accuracy=None):
    """`softplus` on validated operands; `traced` is its custom_vjp."""
    if is_eager(x, checked):
        beta, hints = eager_beta(beta, x.dtype, True, x)
        return eager_forward(x, beta, hints, accuracy)
    return traced(x, checked, hints, accuracy)


def backward_call(src, diff_dst, beta, checked, hints, accuracy=None):
    """`softplus_backward` on checked operands (as `forward_call`'s)."""
    if is_eager(src, diff_dst, checked):
        beta, hints = eager_beta(beta, src.dtype, False, diff_dst, src)
        return eager_backward(src, diff_dst, beta, hints, accuracy)
    return bind(src, diff_dst, checked, hints, accuracy)


# In place --------------------------------------------------------------------


def _inplace(src, diff_dst, beta, hints, accuracy=None, layout=None, shards=None):
    """The in-place op's jit body: the primitive asked for a program that
    XLA can write over the donated diff_dst (at HIGHEST, the two passes),
    on each shard of `shards` (`_shards`) or as a whole."""

    def call(src, diff_dst, beta):
        return bind(src, diff_dst, beta, hints, accuracy, inplace=True)

    if shards is None:
        out = call(src, diff_dst, beta)
    else:
        out = _sharding.per_shard(call, src, diff_dst, beta, sharding=shards)
    if layout is not None:
        # The result must be laid out as diff_dst for XLA to reuse its buffer;
        # left to itself it may follow src's sharding and allocate.
        out = _sharding.constrain(out, layout)
    return out


_STATIC_INPLACE = ("hints", "accuracy", "shards")
_inplace_jit = own_jit(
    _inplace,
    donate_argnames=("diff_dst",),
    static_argnames=(*_STATIC_INPLACE, "layout"),
)


def _inplace_self(diff_dst, beta, hints, accuracy=None, shards=None):
    return _inplace(diff_dst, diff_dst, beta, hints, accuracy, shards=shards)


# One array as both operands: the runtime refuses to donate a buffer that the
# same call also reads as another argument, so the kernel reads its one
# (donated) argument twice. Still in place: each element is read, then written.
_inplace_self_jit = own_jit(
    _inplace_self, donate_argnames=("diff_dst",), static_argnames=_STATIC_INPLACE
)


def _shards(diff_dst, accuracy):
    """diff_dst's `NamedSharding` where it spans several devices and the
    call is at HIGHEST on a dtype it evaluates apart: each shard then takes
    the loop of the undecided elements in its own buffer (over the whole
    array, XLA's partitioner would gather them). None elsewhere. A spec
    without a layout is on one device."""
    if accuracy != "highest" or diff_dst.dtype not in _validate.HIGHEST_DTYPES:
        return None
    sharding = diff_dst.sharding
    if (
        isinstance(sharding, jax.sharding.NamedSharding)
        and len(sharding.device_set) > 1
    ):
        return sharding
    return None


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


def _run_inplace(jitted, operands, diff_dst, placed, hints, accuracy, **layout):
    """Run an in-place jit (`_inplace_jit` with its `layout`, or
    `_inplace_self_jit` for one array as both operands) on `operands`
    (diff_dst among them) and beta `placed`; warn where the runtime kept
    diff_dst."""
    hunter = _hunter()
    if hunter:
        # A result with a NaN (inf) makes JAX re-run the call op by op on its
        # arguments, which must still be alive: JAX donates nothing under
        # debug_nans, but does under debug_infs (a RuntimeError then, for
        # an array deleted). The plain op: the same values, a new array.
        out = eager_backward(operands[0], diff_dst, placed, hints, accuracy)
        _warn_not_donated(hunter)
        return out
    shards = _shards(diff_dst, accuracy)
    out = jitted(
        *operands, placed, hints=hints, accuracy=accuracy, shards=shards, **layout
    )
    if not diff_dst.is_deleted():
        _warn_not_donated()
    return out


def inplace_call(
    src, diff_dst, beta, checked, hints, accuracy=None, *, converted=False
):
    """`softplus_backward_inplace` on validated operands.

    `converted`: diff_dst is the library's own conversion of a host array.
    On the CPU `jnp.asarray` may share an aligned NumPy array's memory,
    which the runtime will not donate, so an eager call copies it first.
    """
    if not is_eager(src, diff_dst, checked):
        # Under an outer jit/vmap/grad (closed-over arrays included) there is
        # no buffer to donate: the outer computation owns its buffers (donate
        # its arguments instead).
        return bind(src, diff_dst, checked, hints, accuracy)
    if converted:
        diff_dst = jnp.array(diff_dst, copy=True)
    placed, hints = eager_beta(beta, diff_dst.dtype, False, diff_dst)
    if src is diff_dst or _one_buffer(src, diff_dst):
        operands = (diff_dst,)
        return _run_inplace(
            _inplace_self_jit, operands, diff_dst, placed, hints, accuracy
        )
    diff_dst = _follow_src(src, diff_dst)
    layout = _layout(src, diff_dst)
    operands = (src, diff_dst)
    return _run_inplace(
        _inplace_jit, operands, diff_dst, placed, hints, accuracy, layout=layout
    )


def eager_inplace(src, diff_dst, placed, hints, accuracy=None):
    """`inplace_call` for operands that `two_arrays_alike` takes (nothing
    to move, relayout or copy first) and a beta from `eager_beta`."""
    operands = (src, diff_dst)
    return _run_inplace(
        _inplace_jit, operands, diff_dst, placed, hints, accuracy, layout=None
    )


def _one_buffer(src, diff_dst) -> bool:
    """Whether two array objects hold the same buffers (`jax.device_put(a,
    a.sharding)` is a new object on `a`'s buffer): the runtime refuses to
    donate a buffer that the same call also reads. Both of one shape and
    dtype."""
    try:
        return src.unsafe_buffer_pointer() == diff_dst.unsafe_buffer_pointer()
    except RuntimeError:  # several shards (or a deleted array: checked later)
        if src.is_deleted() or diff_dst.is_deleted():
            return False
    pointers = {s.data.unsafe_buffer_pointer() for s in src.addressable_shards}
    return any(
        s.data.unsafe_buffer_pointer() in pointers for s in diff_dst.addressable_shards
    )


def _hunter() -> str | None:
    """The option of JAX's NaN or inf hunter that is on, if one is."""
    if _compat.debug_nans():
        return "jax_debug_nans"
    return "jax_debug_infs" if _compat.debug_infs() else None


def _warn_not_donated(hunter: str | None = None):
    """Warn that diff_dst was not donated: because of the option `hunter`,
    or else because the runtime declined."""
    if jax.config.jax_disable_jit:
        return  # documented: nothing is donated without jit
    if hunter:
        cause = (
            f"{hunter} is on, and JAX re-runs a call that gives a NaN or an inf "
            "on its arguments"
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
        # At the caller of softplus_backward_inplace, through _run_inplace
        # and inplace_call (or eager_inplace).
        stacklevel=5,
    )


def inplace_lower(src, diff_dst, checked, accuracy=None):
    """`softplus_backward_inplace.lower`: compiled for any beta (no hints);
    at HIGHEST, what the call runs."""
    layout = _layout(src, diff_dst)
    shards = _shards(diff_dst, accuracy)
    return _inplace_jit.lower(
        src,
        diff_dst,
        checked,
        hints=BetaHints(),
        accuracy=accuracy,
        shards=shards,
        layout=layout,
    )


def cache_sizes() -> dict[str, int]:
    """Executables held by the library's own jits, by name (for tests)."""
    sizes = {
        "forward": _FORWARD._cache_size(),
        "backward": _BACKWARD._cache_size(),
        "default_forward": DEFAULT_FORWARD._cache_size(),
        "inplace": _inplace_jit._cache_size(),
        "inplace_self": _inplace_self_jit._cache_size(),
    }
    return sizes


# Beta beside the data --------------------------------------------------------


def _home(data: Any) -> Any:
    """Where the beta of an eager call on `data` goes, as a cache key: the
    first JAX array's sharding, else the default device (None where that is
    a platform name: JAX picks the device)."""
    for array in data:
        if type(array) is _compat.ArrayImpl:  # the only concrete jax.Array
            return array.sharding
    device = _compat.default_device() or jax.local_devices()[0]
    return device if isinstance(device, jax.Device) else None


# Each beta value checked and copied once per data dtype, op and placement:
# a host scalar would be copied on every call (about 28 us against 0.7 us
# for the lookup, measured on an AMD EPYC Zen 4, jax 0.10.2), and that
# implicit transfer is an error under jax.transfer_guard("disallow"), which
# JAX's own ops pass.
@functools.lru_cache(maxsize=256)
def _number_beta(number: float, dtype: np.dtype, forward: bool, home: Any):
    checked, hints = _validate.check_beta(number, dtype, forward=forward)
    if isinstance(home, jax.sharding.SingleDeviceSharding):
        home = next(iter(home.device_set))
    if isinstance(home, jax.Device):
        # Uncommitted, as a host scalar is: the result is then committed to
        # the device only if the data is.
        with jax.default_device(home):
            return jax.device_put(checked), hints
    where = _scalar_sharding(home)
    if where is None:
        return checked, hints  # JAX converts it with the data
    return jax.device_put(checked, where), hints


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


def eager_beta(given: Any, dtype: np.dtype, forward: bool, *data: Any):
    """The beta of an eager call on `data` (of dtype `dtype`): checked, as
    an array where the first JAX array of `data` lives, and its `BetaHints`.

    `given` itself when it is a device array of the compute dtype beside
    the data (not one of the data, such as a donated `diff_dst`, and not a
    subnormal that the check flushed to 0): committed, it commits the
    result, as it does for `x * beta`. Any other value is copied there once
    per value, explicitly, and kept. A NumPy scalar comes back for host
    data on a platform JAX picks, and for data whose layout names no mesh.
    """
    home = _home(data)
    number = _validate.beta_number(given)
    if number is not None:
        return _number_beta(number, dtype, forward, home)
    # A device array (read once, `check_beta`) or a 0-d NumPy array.
    checked, hints = _validate.check_beta(given, dtype, forward=forward)
    if (
        isinstance(given, jax.Array)
        and given.dtype == checked.dtype
        and checked != 0
        and all(given is not array for array in data)
        and isinstance(home, jax.sharding.Sharding)
        and given.sharding == _scalar_sharding(home)
    ):
        return given, hints
    return _number_beta(float(checked), checked.dtype, forward, home)
