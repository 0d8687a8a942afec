"""Dispatch: where a validated call runs, and where its beta lives.

Three ways in, one primitive:

- **Traced** (inside `jit`, `vmap`, `grad`, `scan`, `checkify`, ..., or on
  arrays closed over by one): the op binds `softplus_backward_p` (or traces
  the forward kernel) into the surrounding computation.
- **Eager, at the top level**: the op runs one of the library's own jits,
  compiled with 512-bit CPU vectors, in one device call, with `beta` as an
  argument on the device beside the data. Python numbers and NumPy values
  go in as they are, to a jit keyed by their host metadata that checks and
  promotes them on its tracers (`host_forward_call`, `host_backward_call`);
  concrete JAX arrays to a jit keyed by dtype, layout and beta
  (`array_forward_call`); anything else through the checks first (`call`).
  This skips the Python of `bind` and JAX's dispatch (docs/benchmarks.md,
  "Eager calls").
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
import types
import warnings
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_softplus import (
    _compat,
    _forward,
    _highest,
    _platforms,
    _sharding,
    _validate,
    _wide,
)
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


def call(
    eager,
    traced,
    data: tuple,
    beta: Any,
    checked: Any,
    hints: BetaHints,
    accuracy: str | None = None,
):
    """Run an op on validated operands.

    At the top level `eager(*data, placed_beta, hints=hints,
    accuracy=accuracy)`, one of the library's own jits; inside a trace
    `traced(*data, checked, hints, accuracy)`. `beta` is what the caller
    passed, `checked` its validated value; `accuracy` is checked too (None
    or "highest").
    """
    if is_eager(*data, checked):
        placed = place_beta(beta, checked, data[-1])
        return eager_jit(eager, hints, accuracy)(*data, placed)
    return traced(*data, checked, hints, accuracy)


# The library's jits of its top-level calls, one per (function, hints,
# accuracy): a call passes dynamic arguments only, the fastest way through
# JAX's dispatch, and every eager route shares the executables.
_EAGER_JITS: dict = {}


def eager_jit(fun, hints: BetaHints, accuracy: str | None = None):
    """The library's jit of `fun` with `hints` and `accuracy` fixed (wide
    CPU vectors)."""
    key = (fun, hints, accuracy)
    jitted = _EAGER_JITS.get(key)
    if jitted is None:
        fixed = functools.partial(fun, hints=hints, accuracy=accuracy)
        jitted = _EAGER_JITS[key] = own_jit(fixed)
    return jitted


def _default_beta_jit(fun, hints: BetaHints, accuracy: str | None, dtype):
    """`eager_jit(fun, ...)` with beta = 1 (the default) fixed in, of the
    data alone: each array argument costs the dispatch about a microsecond,
    a quarter of the eager overhead over `jax.nn.softplus` (Zen 4). The
    kernels read beta behind a barrier, so a constant one gives the bits of
    a passed one."""
    key = (fun, hints, accuracy, "beta = 1", np.dtype(dtype))
    jitted = _EAGER_JITS.get(key)
    if jitted is None:
        one = np.asarray(1, dtype)

        def fixed(*data):
            return fun(*data, one, hints=hints, accuracy=accuracy)

        jitted = _EAGER_JITS[key] = own_jit(fixed)
    return jitted


def _entry(fun, hints, accuracy, checked, place):
    """(jit, beta as passed) for an eager fast path's cache: the jit of the
    data alone and None for the default beta, else `eager_jit` and the
    placed beta (`place(checked)`)."""
    if checked == 1:
        return _default_beta_jit(fun, hints, accuracy, checked.dtype), None
    return eager_jit(fun, hints, accuracy), place(checked)


def backward_call(src, diff_dst, beta, checked, hints, accuracy=None):
    """`softplus_backward` on validated operands."""
    return call(bind, bind, (src, diff_dst), beta, checked, hints, accuracy)


# Eager calls on host values -----------------------------------------------------
# A Python number or a NumPy value goes into the library's jit as it is: JAX's
# own argument handling converts it, in the one dispatch of the call (as for
# `jax.nn.softplus`), and the checks and promotion run on its tracer, once per
# input type. beta is checked on the host first (its hints are static) and
# passed as a Python float, which the jit takes without a copy of its own.

_PY_NUMBERS = (bool, int, float)


def _fast_beta(beta: Any, dtype: Any = None, forward: bool = False) -> Any:
    """beta as the fast paths take it, or None for the checked path: a
    Python float or int as it is, and a NumPy integer or float scalar as
    the Python number of its value, which the checks give the same bits,
    dtype and errors (a `np.float32` beta took the checked path: 2.3x the
    time of a Python float's call at 1K elements, Zen 5). With the data's
    `dtype`, where it is one the kernels take, a concrete JAX scalar too, as
    its checked value (the checks read each array once,
    `_validate.check_beta`; they raise here what they raise there). Bools
    and other arrays take the checked path."""
    kind = type(beta)
    if kind is float or kind is int:
        return beta
    if isinstance(beta, (np.floating, np.integer)):  # np.bool_ is neither
        value = beta.item()
        if type(value) in (float, int):  # not a float128's np.longdouble
            return value
    if kind is _compat.ArrayImpl and dtype in _validate.data_dtypes():
        return float(_validate.check_beta(beta, dtype, forward=forward)[0])
    return None


def _fast_accuracy(accuracy: Any) -> bool:
    """Whether the fast paths take this `accuracy` as a cache key: None or
    an AccuracyMode (a Tolerance takes the checked path)."""
    return accuracy is None or isinstance(accuracy, jax.lax.AccuracyMode)


def _host_kind(value: Any) -> Any:
    """What the host path keys a value by: ("python", its type) for a Python
    number, ("numpy", its dtype) for a NumPy array or scalar; None for
    anything else (JAX arrays, containers, strings), which the checked path
    takes. A NumPy dtype the path cannot take is told apart on the first
    call (`host_forward_call`). (A NumPy dtype compares equal to a Python
    type: the two are kept apart.)"""
    kind = type(value)
    if kind in _PY_NUMBERS:
        return ("python", kind)
    if kind is np.ndarray or isinstance(value, np.generic):
        return ("numpy", value.dtype)
    return None


@functools.lru_cache(maxsize=128)
def _host_data_dtype(kind: Any, x64: bool) -> np.dtype:
    """The dtype `softplus` computes a host value of this kind in (its
    promotion, read off the checks themselves)."""
    del x64  # part of the key: canonical dtypes depend on it
    source, of = kind
    if source == "python":
        spec = jax.ShapeDtypeStruct((), jnp.asarray(of(0)).dtype, weak_type=True)
    else:
        spec = jax.ShapeDtypeStruct((), of)
    out = jax.eval_shape(lambda v: _validate.check_forward_operand(v)[0], spec)
    return np.dtype(out.dtype)


def _host_forward(x, beta, *, hints, accuracy):
    x, weak = _validate.check_forward_operand(x)
    beta = jax.lax.convert_element_type(beta, _validate.compute_dtype(x.dtype))
    out = _forward.value(x, beta, hints, accuracy)
    return _compat.weakly_typed(out) if weak else out


# (input kind, beta, x64) -> (jit, beta as it is passed): one lookup for
# what the checks of beta decide, made once per value (up to the bound).
_HOST_FORWARD: dict = {}
_CACHE_BOUND = 1024


def _host_beta(checked, default_device):
    """beta for a host value's call: a device copy where the value will go
    (a Python float is converted on every call, a device array is not), or
    the float where that device cannot be told."""
    device = default_device
    if device is None:
        device = jax.local_devices()[0]
    if not isinstance(device, jax.Device):
        return float(checked)  # a platform name: JAX picks the device
    sharding = jax.sharding.SingleDeviceSharding(device)
    return _placed(float(checked), checked.dtype, sharding)


def _remember(cache, key, value):
    if len(cache) >= _CACHE_BOUND:
        cache.clear()
    cache[key] = value
    return value


def host_forward_call(x: Any, beta: Any, accuracy: Any = None) -> Any:
    """`softplus(x, beta)` at the top level for a host `x` and a Python or
    NumPy number `beta`, in one dispatch; None where the checked path must
    run."""
    kind, beta = _host_kind(x), _fast_beta(beta)
    if kind is None or beta is None or not _fast_accuracy(accuracy):
        return None
    key = (kind, beta, accuracy, _compat.x64_enabled(), _compat.default_device())
    hit = _HOST_FORWARD.get(key)
    if hit is None:
        if kind[0] == "numpy" and not _validate.real_dtype(kind[1]):
            return None  # complex, strings...: the checked path says why
        dtype = _host_data_dtype(kind, bool(key[3]))
        checked, hints = _validate.check_beta(beta, dtype, forward=True)
        level = _validate.check_accuracy(accuracy, dtype)
        entry = _entry(
            _host_forward, hints, level, checked, lambda c: _host_beta(c, key[4])
        )
        hit = _remember(_HOST_FORWARD, key, entry)
    if not _compat.trace_state_clean():
        return None
    fun, placed = hit
    return fun(x) if placed is None else fun(x, placed)


# (dtype, sharding, beta, x64) -> (jit, placed beta), for a live, strongly
# typed JAX array of a kernel dtype: the checks it needs are one lookup.
_ARRAY_FORWARD: dict = {}


def _default_forward(x):
    """softplus(x) at the default beta and accuracy, traced."""
    if _validate.is_complex(x):
        return jax.nn.softplus(x)  # what `softplus` gives complex x at beta 1
    x, weak = _validate.check_forward_operand(x)
    checked, hints = _validate.check_beta(1.0, x.dtype, forward=True)
    beta = jax.lax.convert_element_type(checked, checked.dtype)
    out = _forward.value(x, beta, hints, None)
    return _compat.weakly_typed(out) if weak else out


# One jit for `softplus(x)`, as `jax.nn.softplus(x)` is: its own C++
# dispatch keys it by dtype, shape, layout and weak type (and converts a
# host value), so the call costs what jax.nn.softplus's does and a few
# checks more (0.3 of that call was Python lookups before, on a Zen 4).
_DEFAULT_FORWARD = own_jit(_default_forward)


def default_forward_call(x: Any) -> Any:
    """`softplus(x)` (default beta and accuracy) at the top level for a live
    JAX array, a Python float, or a NumPy number or array; None otherwise
    (the checked path says what is wrong with anything else)."""
    kind = type(x)
    if kind is _compat.ArrayImpl:
        if x.is_deleted():
            return None
    elif kind is not float and (
        not isinstance(x, (np.ndarray, np.generic)) or x.dtype.kind not in "biufc"
    ):
        return None
    if not _compat.trace_state_clean() or _compat.jit_disabled():
        return None
    return _DEFAULT_FORWARD(x)


def array_forward_call(x: Any, beta: Any, accuracy: Any = None) -> Any:
    """`softplus(x, beta)` at the top level for a JAX array that the kernel
    takes as it is and a Python or NumPy number `beta`; None otherwise. The
    common case is one dict lookup before the call."""
    if type(x) is not _compat.ArrayImpl or x.weak_type:
        return None
    beta = _fast_beta(beta, x.dtype, forward=True)
    if beta is None:
        return None
    if not _fast_accuracy(accuracy):
        return None
    hit = _array_hit(_ARRAY_FORWARD, x, beta, accuracy, _forward.value, True)
    if hit is None or x.is_deleted() or not _compat.trace_state_clean():
        return None
    fun, placed = hit
    return fun(x) if placed is None else fun(x, placed)


def _array_hit(cache, x, beta, accuracy, fun, forward):
    """An array path's (jit, placed beta) for `x`'s dtype and layout, made
    on the first call (None where the checked path must run). Keyed without
    the layout, which is checked against the entry's (by identity first: a
    sharding's hash costs as much as the rest of the lookup)."""
    key = (x.dtype, beta, _compat.x64_enabled(), accuracy)
    hit = cache.get(key)
    sharding = x.sharding
    if hit is not None and (hit[0] is sharding or hit[0] == sharding):
        return hit[1]
    full = (x.dtype, sharding, *key[1:])
    entry = _array_entry(cache, full, fun, forward)
    if entry is not None:
        _remember(cache, key, (sharding, entry))
    return entry


def _array_entry(cache, key, fun, forward):
    """(the library's jit of `fun`, beta placed beside the data) for an
    array path's full key (dtype, sharding, beta, x64, accuracy), kept in
    `cache` under it too (a layout that alternates with another keeps its
    entry); None where the checked path must run."""
    hit = cache.get(key)
    if hit is not None:
        return hit
    dtype, sharding, beta, _, accuracy = key
    if dtype not in _validate.data_dtypes():
        return None
    scalar = _scalar_sharding(sharding)
    if scalar is None:
        return None
    checked, hints = _validate.check_beta(beta, dtype, forward=forward)
    level = _validate.check_accuracy(accuracy, dtype)
    entry = _entry(
        fun, hints, level, checked, lambda c: _placed(float(c), c.dtype, scalar)
    )
    return _remember(cache, key, entry)


def _host_backward(src, diff_dst, beta, *, hints, accuracy):
    src, diff_dst, weak = _validate.check_operands(src, diff_dst)
    beta = jax.lax.convert_element_type(beta, _validate.compute_dtype(src.dtype))
    out = bind(src, diff_dst, beta, hints, accuracy)
    return _compat.weakly_typed(out) if weak else out


_HOST_BACKWARD: dict = {}


def host_backward_call(src: Any, diff_dst: Any, beta: Any, accuracy: Any = None) -> Any:
    """`softplus_backward` at the top level for two NumPy arrays of one
    float dtype and shape, or two Python floats, and a Python or NumPy
    number beta (or for two JAX arrays, a concrete JAX scalar too), in one
    dispatch; None where the checked path must run (it gives mixed operands
    their dtypes and errors)."""
    kind = type(src)
    if kind is not type(diff_dst):
        return None
    dtype = src.dtype if kind is _compat.ArrayImpl else None
    beta = _fast_beta(beta, dtype)
    if beta is None:
        return None
    if not _fast_accuracy(accuracy):
        return None
    if kind is _compat.ArrayImpl:
        return _array_backward_call(src, diff_dst, beta, accuracy)
    if kind is np.ndarray:
        if src.dtype != diff_dst.dtype or src.shape != diff_dst.shape:
            return None
        of = src.dtype
    elif kind is float:
        of = float
    else:
        return None
    key = (kind, of, beta, accuracy, _compat.x64_enabled(), _compat.default_device())
    hit = _HOST_BACKWARD.get(key)
    if hit is None:
        dtype = jax.dtypes.canonicalize_dtype(of)
        if dtype not in _validate.data_dtypes():
            return None
        checked, hints = _validate.check_beta(beta, dtype, forward=False)
        level = _validate.check_accuracy(accuracy, dtype)
        entry = _entry(
            _host_backward, hints, level, checked, lambda c: _host_beta(c, key[5])
        )
        hit = _remember(_HOST_BACKWARD, key, entry)
    if not _compat.trace_state_clean():
        return None
    fun, placed = hit
    return fun(src, diff_dst) if placed is None else fun(src, diff_dst, placed)


# (dtype, sharding, beta, x64) -> (jit, placed beta), for two live, strongly
# typed JAX arrays of one kernel dtype, shape and layout.
_ARRAY_BACKWARD: dict = {}


def _array_backward_call(src: Any, diff_dst: Any, beta: Any, accuracy: Any) -> Any:
    """`host_backward_call` for two concrete JAX arrays; one lookup."""
    if (
        src.weak_type
        or diff_dst.weak_type
        or src.dtype != diff_dst.dtype
        or src.shape != diff_dst.shape
        or src.sharding != diff_dst.sharding
    ):
        return None
    hit = _array_hit(_ARRAY_BACKWARD, src, beta, accuracy, bind, False)
    if hit is None:
        return None
    if src.is_deleted() or diff_dst.is_deleted() or not _compat.trace_state_clean():
        return None
    fun, placed = hit
    return fun(src, diff_dst) if placed is None else fun(src, diff_dst, placed)


# In place --------------------------------------------------------------------


def _inplace(src, diff_dst, beta, hints, accuracy=None, layout=None):
    out = bind(src, diff_dst, beta, hints, accuracy)
    if layout is not None:
        # The result must be laid out as diff_dst for XLA to reuse its buffer;
        # left to itself it may follow src's sharding and allocate.
        out = _sharding.constrain(out, layout)
    return out


_inplace_jit = own_jit(
    _inplace,
    donate_argnames=("diff_dst",),
    static_argnames=("hints", "accuracy", "layout"),
)


def _inplace_self(diff_dst, beta, hints, accuracy=None):
    return _inplace(diff_dst, diff_dst, beta, hints, accuracy)


# One array as both operands: the runtime refuses to donate a buffer that the
# same call also reads as another argument, so the kernel reads its one
# (donated) argument twice. Still in place: each element is read, then written.
_inplace_self_jit = own_jit(
    _inplace_self, donate_argnames=("diff_dst",), static_argnames=("hints", "accuracy")
)

# At HIGHEST, data on one device of a platform with float64 are written
# over diff_dst too, in two passes (`_highest.backward_inplace`): the first
# marks the rare elements whose rounding float64 leaves in doubt, and the
# second leaves their diff_dst in place for the step that resolves them.
# Sharded data take them on each shard. Elsewhere (a TPU's float32
# evaluation, shardings other than a NamedSharding) that step reads
# diff_dst after the main pass wrote its result, so a donated call would
# make XLA write that result into a temporary as large as it and copy it
# into diff_dst's buffer: there the call takes a new output instead, and
# deletes diff_dst after it.
_HIGHEST_JITS = {
    _inplace_jit: own_jit(_inplace, static_argnames=("hints", "accuracy", "layout")),
    _inplace_self_jit: own_jit(_inplace_self, static_argnames=("hints", "accuracy")),
}


def _inplace_highest(src, diff_dst, beta, layout=None, shards=None):
    """The two passes, on each shard of `shards` (diff_dst's sharding over
    several devices) or on the one device."""
    with _wide._float64():
        if shards is None:
            out = _highest.backward_inplace(src, diff_dst, beta)
        else:
            out = _sharding.per_shard(
                _highest.backward_inplace, src, diff_dst, beta, sharding=shards
            )
    if layout is not None:
        out = _sharding.constrain(out, layout)
    return out


def _inplace_highest_self(diff_dst, beta, shards=None):
    return _inplace_highest(diff_dst, diff_dst, beta, shards=shards)


_OVER = {
    _inplace_jit: own_jit(
        _inplace_highest,
        donate_argnames=("diff_dst",),
        static_argnames=("layout", "shards"),
    ),
    _inplace_self_jit: own_jit(
        _inplace_highest_self,
        donate_argnames=("diff_dst",),
        static_argnames=("shards",),
    ),
}


def _writes_over(diff_dst, accuracy):
    """(over, shards): whether an in-place call at `accuracy` writes over
    diff_dst in two passes (HIGHEST on float32, bfloat16 or float16 data
    on a platform with float64), and diff_dst's `NamedSharding` where it
    spans several devices (each shard then takes the two passes; another
    sharding over several devices takes a new output). A spec without a
    layout is on the default backend."""
    if accuracy != "highest" or diff_dst.dtype not in _validate.HIGHEST_DTYPES:
        return False, None
    sharding = diff_dst.sharding
    if sharding is None:
        platforms, shards = {jax.default_backend()}, None
    else:
        platforms = {d.platform for d in sharding.device_set}
        shards = sharding if len(sharding.device_set) > 1 else None
        if shards is not None and not isinstance(shards, jax.sharding.NamedSharding):
            return False, None
    kinds = {_platforms.kind({"gpu": "cuda"}.get(p, p)) for p in platforms}
    return kinds <= {"cpu", "gpu"}, shards


def _twin(accuracy, dtype):
    """Whether an in-place call at `accuracy` that is not written over in
    two passes takes the jit that donates nothing: HIGHEST on the dtypes it
    evaluates apart (float64 at HIGHEST is the default kernel, donated)."""
    return accuracy == "highest" and dtype in _validate.HIGHEST_DTYPES


def _inplace_for(jitted, accuracy, dtype):
    """The in-place jit, or where `_twin` its twin that donates nothing."""
    return _HIGHEST_JITS[jitted] if _twin(accuracy, dtype) else jitted


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


def _inplace_plan(own, diff_dst, hints, accuracy, layout=None):
    """(jit, its static arguments, whether diff_dst is deleted after the
    call) of an in-place call: `own` (`_inplace_jit`, or `_inplace_self_jit`
    for one array as both operands, which takes no layout), its two-pass
    twin where `_writes_over`, or its twin that donates nothing (`_twin`)."""
    over, shards = _writes_over(diff_dst, accuracy)
    static = {"shards": shards} if over else {"hints": hints, "accuracy": accuracy}
    if own is _inplace_jit:
        static["layout"] = layout
    if over:
        return _OVER[own], static, False
    dtype = diff_dst.dtype
    return _inplace_for(own, accuracy, dtype), static, _twin(accuracy, dtype)


def _run_inplace(plan, operands, diff_dst, placed):
    """Run an in-place `plan` on `operands` (diff_dst among them) and beta
    `placed`; then delete diff_dst where the plan's jit donates nothing, or
    warn where the runtime kept it."""
    jitted, static, deletes = plan
    out = jitted(*operands, placed, **static)
    if deletes:
        diff_dst.delete()
    elif not diff_dst.is_deleted():
        _warn_not_donated()
    return out


# (dtype, beta, x64, accuracy) -> (sharding, (plan, placed beta)), for two distinct,
# live, strongly typed JAX arrays of one kernel dtype, shape and layout: the
# in-place op's checks are one lookup, as the other ops' are.
_ARRAY_INPLACE: dict = {}


def inplace_fast_call(src: Any, diff_dst: Any, beta: Any, accuracy: Any = None) -> Any:
    """`softplus_backward_inplace` at the top level for two distinct, live,
    strongly typed JAX arrays of one kernel dtype, shape and layout and a
    Python or NumPy number or a JAX scalar beta, in one dispatch (the
    checked path took 8.6 us per call at 1K float32 elements, a donated jit
    of the naive formula 5.1 us, Zen 5); None where the checked path must
    run. It runs what `inplace_call` runs (`_inplace_plan`, `_run_inplace`)."""
    if (
        type(src) is not _compat.ArrayImpl
        or type(diff_dst) is not _compat.ArrayImpl
        or src is diff_dst
        or not _fast_accuracy(accuracy)
    ):
        return None
    aval = diff_dst.aval  # dtype, shape and weak type in one comparison
    if aval.weak_type or src.aval != aval or _one_buffer(src, diff_dst):
        return None
    beta = _fast_beta(beta, aval.dtype)
    if beta is None:
        return None
    sharding = diff_dst.sharding
    if src.sharding is not sharding and src.sharding != sharding:
        return None
    key = (diff_dst.dtype, beta, _compat.x64_enabled(), accuracy)
    hit = _ARRAY_INPLACE.get(key)
    if hit is None or (hit[0] is not sharding and hit[0] != sharding):
        entry = _inplace_entry(diff_dst, beta, accuracy)
        if entry is None:
            return None
        hit = _remember(_ARRAY_INPLACE, key, (sharding, entry))
    if src.is_deleted() or diff_dst.is_deleted() or not _compat.trace_state_clean():
        return None
    plan, placed = hit[1]
    return _run_inplace(plan, (src, diff_dst), diff_dst, placed)


def _inplace_entry(data, beta, accuracy):
    """`inplace_fast_call`'s cache entry for data like `data`, or None
    where the checked path must run (a dtype or layout it does not take)."""
    dtype = data.dtype
    scalar = _scalar_sharding(data.sharding)
    if dtype not in _validate.data_dtypes() or scalar is None:
        return None
    checked, hints = _validate.check_beta(beta, dtype, forward=False)
    level = _validate.check_accuracy(accuracy, dtype)
    placed = _placed(float(checked), checked.dtype, scalar)
    return _inplace_plan(_inplace_jit, data, hints, level), placed


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
    # Never diff_dst itself (a 0-d one): a donated buffer cannot be read too.
    placed = place_beta(None if beta is diff_dst else beta, checked, diff_dst)
    if src is diff_dst or _one_buffer(src, diff_dst):
        plan = _inplace_plan(_inplace_self_jit, diff_dst, hints, accuracy)
        return _run_inplace(plan, (diff_dst,), diff_dst, placed)
    diff_dst = _follow_src(src, diff_dst)
    layout = _layout(src, diff_dst)
    plan = _inplace_plan(_inplace_jit, diff_dst, hints, accuracy, layout)
    return _run_inplace(plan, (src, diff_dst), diff_dst, placed)


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


def inplace_lower(src, diff_dst, checked, accuracy=None):
    """`softplus_backward_inplace.lower`: compiled for any beta (no hints);
    at HIGHEST, what the call runs."""
    layout = _layout(src, diff_dst)
    plan = _inplace_plan(_inplace_jit, diff_dst, BetaHints(), accuracy, layout)
    jitted, static, _ = plan
    return jitted.lower(src, diff_dst, checked, **static)


def forward_call(x, beta, checked, hints, traced, accuracy=None):
    """`softplus` on validated operands; `traced` is its custom_vjp."""
    return call(_forward.value, traced, (x,), beta, checked, hints, accuracy)


def clear_caches() -> None:
    """Forget every plan the eager paths made: which jit runs a call
    depends on the platform being lowered for (`testing.lowered_as`)."""
    for cache in (_HOST_FORWARD, _ARRAY_FORWARD, _HOST_BACKWARD, _ARRAY_BACKWARD):
        cache.clear()
    _ARRAY_INPLACE.clear()


def cache_sizes() -> dict[str, int]:
    """Executables held by the library's own jits, by name (for tests)."""
    names = {
        bind: "backward",
        _forward.value: "forward",
        _host_forward: "host_forward",
        _host_backward: "host_backward",
    }
    sizes = dict.fromkeys(names.values(), 0)
    for (fun, *_), jitted in _EAGER_JITS.items():
        sizes[names[fun]] += jitted._cache_size()
    sizes["default_forward"] = _DEFAULT_FORWARD._cache_size()
    for name, own in (("inplace", _inplace_jit), ("inplace_self", _inplace_self_jit)):
        twins = (own, _HIGHEST_JITS[own], _OVER[own])
        sizes[name] = sum(jitted._cache_size() for jitted in twins)
    return sizes


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
