"""Where the operands live: one mesh type for an elementwise op, as JAX's own
ops give, and a concrete beta placed beside the data for eager calls.

Inside `shard_map` values are typed with the mesh axes they vary over; over
explicit mesh axes, with their sharding. `bind` matches its operands' types
before binding the primitive, so that the result's type is right and a
replicated operand's cotangent is summed over the mesh.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np

from jax_softplus import _compat


def match_varying(*args: Any) -> tuple:
    """Cast each operand to vary over every axis that any operand varies over.

    What JAX's own elementwise ops do before `bind` inside `shard_map`: an
    elementwise result varies wherever an operand does, and the cast's
    transpose (a `psum`) is what sums a replicated operand's cotangent.
    Outside `shard_map` nothing varies and the operands come back as they are.
    """
    axes = [_compat.varying_axes(jax.typeof(a)) for a in args]
    union = frozenset().union(*axes)
    if not union:
        return args
    return tuple(
        a if ax == union else jax.lax.pcast(a, tuple(union - ax), to="varying")
        for a, ax in zip(args, axes, strict=True)
    )


def sharding_spec(aval: Any) -> tuple | None:
    """`aval`'s PartitionSpec, one entry per dimension, where the mesh axes
    are explicit (sharding in types: `jax.sharding.AxisType.Explicit`).

    None where the type names no mesh axis: replicated, or Auto axes, whose
    shardings XLA's partitioner chooses outside the types.
    """
    sharding = getattr(aval, "sharding", None)
    spec = getattr(sharding, "spec", None)
    if (
        spec is None
        or getattr(spec, "unreduced", None)
        or getattr(spec, "reduced", None)
    ):
        return None
    entries = tuple(spec) + (None,) * (len(aval.shape) - len(spec))
    return entries if any(e is not None for e in entries) else None


def match_sharding(names: tuple[str, ...], *args: Any) -> tuple:
    """Reshard same-shape operands to one spec, or raise a `ValueError`.

    JAX's elementwise ops take, along each dimension, the one mesh axis that
    any operand is sharded over (a replicated dimension follows the sharded
    one) and refuse two different axes. Resharding a replicated dimension is
    a local slice, not a collective.
    """
    specs = [sharding_spec(jax.typeof(a)) for a in args]
    known = [s for s in specs if s is not None]
    if not known or all(s == known[0] for s in specs):
        return args
    listing = ", ".join(
        f"{name} P{spec or ()}" for name, spec in zip(names, specs, strict=True)
    )
    advice = (
        "Reshard one to the other's sharding (jax.sharding.reshard(x, spec)); "
        "an elementwise op cannot choose between them."
    )
    combined = []
    for dim, entries in enumerate(zip(*known, strict=True)):
        named = {e for e in entries if e is not None}
        if len(named) > 1:
            raise ValueError(
                f"{' and '.join(names)} are sharded over different mesh axes "
                f"along dimension {dim}: {listing}. {advice}"
            )
        combined.append(named.pop() if named else None)
    used = [
        n
        for e in combined
        if e is not None
        for n in (e if isinstance(e, tuple) else (e,))
    ]
    if len(used) != len(set(used)):
        raise ValueError(
            f"{' and '.join(names)} are sharded over one mesh axis along "
            f"different dimensions: {listing}. {advice}"
        )
    mesh = jax.typeof(args[specs.index(known[0])]).sharding.mesh
    target = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*combined))
    return tuple(
        a if s == tuple(combined) else jax.sharding.reshard(a, target)
        for a, s in zip(args, specs, strict=True)
    )


def constrain(x: Any, sharding: Any) -> Any:
    """Lay `x` out as `sharding` inside a jit: a reshard over explicit mesh
    axes (where sharding is part of the type), else a sharding constraint."""
    axis_types = getattr(getattr(sharding, "mesh", None), "axis_types", ())
    if any(t == jax.sharding.AxisType.Explicit for t in axis_types):
        return jax.sharding.reshard(x, sharding)
    return jax.lax.with_sharding_constraint(x, sharding)


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

    A host scalar would be copied to the device on every call: about 2 us,
    and an error under `jax.transfer_guard("disallow")`, which JAX's own ops
    pass when their scalar is on the device. So `given` itself is passed
    when it is a device array of the checked dtype beside the data (and not
    a subnormal that the check flushed to 0); any other beta is copied there
    once per value, explicitly, and kept. `checked` comes back only for data
    whose layout names no mesh.
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
