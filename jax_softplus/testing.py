"""Testing utilities: run another platform's evaluation on a CPU.

The library's primitives lower per platform (docs/accuracy.md,
"Platforms"): on a CPU the float32 kernels contract FMAs and the
derivatives are evaluated in float64; CUDA and ROCm GPUs evaluate the
derivatives in float64 too but take their own half-precision kernel; a TPU,
which has no float64, takes the portable float32 evaluation. `lowered_as`
has the CPU emit another platform's evaluation, so that its numbers can be
checked on a machine without that accelerator.

What it covers: the operations each platform is given (the same StableHLO,
up to the CPU's own rules being the ones that run). What it cannot: how
that platform's compiler and hardware execute them. XLA:CPU flushes
subnormal results and contracts `a * b + c` into FMAs where the CPU has
them; a GPU's `exp`, `rsqrt` and division, and a TPU's division and
float32 arithmetic, round as that hardware does. Exported programs
(`jax.export` with `platforms=("tpu",)`) show the operations themselves.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax

from jax_softplus import _platforms

__all__ = ["PLATFORMS", "lowered_as"]

#: The platforms `lowered_as` takes.
PLATFORMS: tuple[str, ...] = _platforms.PLATFORMS


@contextlib.contextmanager
def lowered_as(platform: str) -> Iterator[None]:
    """Lower the library's operations on a CPU as they lower for `platform`.

    Inside the context every computation that JAX lowers for a CPU device
    emits `platform`'s evaluation of `softplus`, `softplus_backward` and
    their derivatives of every order; other platforms' lowerings are
    unchanged. JAX's caches are cleared on entry and on exit (the library
    keeps no plans of its own), so that nothing compiled inside is used
    outside, or the reverse (a function jitted before the context is
    compiled again inside it). Contexts nest; the innermost wins. Not
    thread-safe: it changes what every thread lowers.

    Args:
      platform: "cpu", "cuda", "rocm" or "tpu".

    Raises:
      ValueError: `platform` is none of those.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from jax_softplus import softplus
      >>> from jax_softplus.testing import lowered_as
      >>> x, beta = jnp.float32(2.0), jnp.float32(1.5)
      >>> here = jax.grad(softplus, 1)(x, beta)  # float64 evaluation
      >>> with lowered_as("tpu"):
      ...     tpu = jax.grad(softplus, 1)(x, beta)  # float32 double words
      >>> bool(abs(tpu - here) <= jnp.finfo(jnp.float32).eps * abs(here))
      True
    """
    if platform not in _platforms.PLATFORMS:
        raise ValueError(
            f"platform must be one of {', '.join(map(repr, PLATFORMS))}, got "
            f"{platform!r}."
        )
    previous = _platforms.emulated()
    _platforms.set_emulated(platform)
    jax.clear_caches()
    try:
        yield
    finally:
        _platforms.set_emulated(previous)
        jax.clear_caches()
