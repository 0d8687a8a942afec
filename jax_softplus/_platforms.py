"""Which platform's evaluation a lowering emits.

The primitives lower per platform: a CPU gets FMA-contracted kernels and
the derivative families in float64 (`_wide`), CUDA and ROCm the families in
float64 too and their own half-precision kernel, a TPU (or any other
platform) the portable float32 evaluation. Each primitive registers one
rule per platform through `register`, and a rule asks `kind` which
evaluation to emit when it runs, not when it is registered, so that
`jax_softplus.testing.lowered_as` can have the CPU's rules emit another
platform's evaluation and run it here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from jax.interpreters import mlir

# A lowering platform's evaluation: "cpu", "gpu", or None (the portable one,
# which TPUs take).
KINDS = {"cpu": "cpu", "cuda": "gpu", "rocm": "gpu", "tpu": None}
# The platforms a CPU's rules may be lowered as (`set_emulated`).
PLATFORMS = tuple(KINDS)

_emulated: str | None = None


def emulated() -> str | None:
    """The platform the CPU's rules emit the evaluation of, or None."""
    return _emulated


def set_emulated(platform: str | None) -> None:
    """Have the CPU's rules emit `platform`'s evaluation (None: the CPU's
    own). Compiled programs keep what they were lowered with: the caller
    clears JAX's caches (`jax_softplus.testing.lowered_as`)."""
    global _emulated
    if platform is not None and platform not in KINDS:
        raise ValueError(f"platform {platform!r} is none of {', '.join(PLATFORMS)}")
    _emulated = platform


def kind(registered: str | None) -> str | None:
    """The evaluation a rule registered for `registered` emits now."""
    if registered == "cpu" and _emulated is not None:
        return KINDS[_emulated]
    return KINDS.get(registered) if registered is not None else None


def register(prim: Any, evaluation: Callable[[str | None], Callable]) -> None:
    """Register `prim`'s lowering for every platform: `evaluation(kind)` is
    the function of the operands that `mlir.lower_fun` lowers, chosen when
    the rule runs."""

    def rule(registered):
        def lowering(ctx, *args, **params):
            fun = evaluation(kind(registered))
            return mlir.lower_fun(fun, multiple_results=False)(ctx, *args, **params)

        return lowering

    mlir.register_lowering(prim, rule(None))
    for platform in ("cpu", "cuda", "rocm"):
        mlir.register_lowering(prim, rule(platform), platform=platform)


# On a GPU whose float64 unit is slow (consumer cards: 1/64 of the float32
# rate), the derivatives' float64 evaluation is compute-bound; this
# variable, read when a program is lowered, gives GPUs the float32 one
# that TPUs take (docs/accuracy.md, "Platforms").
GPU_FLOAT32_ENV = "JAX_SOFTPLUS_GPU_FLOAT32_DERIVATIVES"


def wide_derivatives(kind: str | None) -> bool:
    """Whether a platform kind evaluates float32 derivatives in float64:
    CPUs, and GPUs unless `GPU_FLOAT32_ENV` is set to 1."""
    if kind == "gpu":
        return os.environ.get(GPU_FLOAT32_ENV, "0") not in ("1", "true", "True")
    return kind == "cpu"
