"""Where the operands live: one mesh type for an elementwise op, as JAX's own
ops give.

Inside `shard_map` values are typed with the mesh axes they vary over; over
explicit mesh axes, with their sharding. `bind` matches its operands' types
before binding the primitive, so that the result's type is right and a
replicated operand's cotangent is summed over the mesh.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import PartitionSpec

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


def per_shard(f: Callable, x: Any, *rest: Any, sharding: Any = None) -> Any:
    """f(x, *rest) on each shard of x, for an elementwise `f` whose body
    slices single elements (HIGHEST's loop).

    `sharding`: x's `NamedSharding` where the caller knows it (an eager
    call's array); otherwise the explicit mesh axes of x's type, over which
    JAX refuses a dynamic slice of a sharded dimension at trace time. The
    operands of x's shape are split as x is (`shard_map` moves one laid out
    otherwise); 0-d ones are replicated. Unsharded, f runs as it is.
    """
    if sharding is None:
        spec = sharding_spec(jax.typeof(x))
        if spec is None:
            return f(x, *rest)
        mesh, spec = jax.typeof(x).sharding.mesh, PartitionSpec(*spec)
    else:
        mesh, spec = sharding.mesh, sharding.spec
    specs = tuple(spec if v.ndim else PartitionSpec() for v in (x, *rest))
    return jax.shard_map(f, mesh=mesh, in_specs=specs, out_specs=spec)(x, *rest)
