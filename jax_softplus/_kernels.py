"""The kernels by dtype: the one place that chooses the arithmetic for each
data dtype, for both directions (float32 and the half types in `_math`,
float64 in `_math64`). `hints` is a `BetaHints`: what a concrete beta lets
the float32 kernels skip.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax import lax

from jax_softplus import _highest, _highest32, _math64, _sharding, _wide
from jax_softplus._math import (
    _BF16,
    canonical_nan,
    fma_contracts,
    from_f32,
    sigmoid_times_bf16,
    sigmoid_times_f16,
    sigmoid_times_f32,
    sigmoid_times_half_gpu,
    softplus_f32,
    to_f32,
)


def fusion_fence(out, dd):
    """out, behind an op that XLA:CPU's library fusions do not take.

    XLA:CPU (jax 0.10) hands a reduction and the elementwise ops that feed
    it to YNNPACK, which takes only the ops it supports: a reduction of this
    kernel's output cut the kernel into nine loops with their intermediates
    in memory (`jnp.sum(softplus_backward(...))` at 16M float32 elements:
    198 ms, 36 ms with this fence, as for the op alone with a fresh output).
    YNNPACK takes no `select`, and XLA's HLO passes do not fold this one;
    LLVM does (`dd > inf` is false for every dd, NaN included), so the loop
    keeps no instruction of it (a compare and a masked store with the
    earlier `dd != dd`: 3% of the 256-bit float32 loop).
    """
    return lax.select(dd > lax.full_like(dd, np.inf), dd, out)


def _infinite_beta_limits(src, dd, beta, out):
    """out, but the limits of finite betas' results where beta is infinite.

    The fused float32 kernel forms its reduced argument as beta * src + c,
    which is inf - inf for an infinite beta. A traced beta only (a concrete
    one is finite): a dozen operations per element, at most 2% of the loop
    in AVX2 code and 5-8% in 512-bit code (benchmarks/results/
    zen4-2026-12-07b/against-0.5.0.md); the other kernels reach the limits
    by themselves. t = beta * src is +-inf, or NaN at src = 0; the limit is
    dd where t > 0 and dd * 0 where t < 0, but an infinite dd keeps itself
    wherever src is finite (sigmoid(t) > 0 for every finite beta).
    """
    infinite = lax.abs(beta) == lax.full_like(beta, np.inf)
    if beta.ndim != src.ndim:  # a scalar beta: of the data's shape and sharding
        sharding = jax.typeof(src).sharding
        beta = lax.broadcast_in_dim(beta, src.shape, (), out_sharding=sharding)
    t = beta * src
    zero = lax.full_like(dd, 0)
    limit = lax.select(t > zero, dd, dd * zero)
    keep = lax.is_finite(src) & (lax.abs(dd) == lax.full_like(dd, np.inf))
    limit = lax.select(keep, dd, limit)
    limit = lax.select(t != t, t, limit)
    return lax.select(infinite, limit, out)


def backward_kernel(
    src, dd, beta, hints, platform=None, *, accuracy=None, inplace=False
):
    """dd * sigmoid(beta * src) in the data's dtype (the primitive's lowering).

    `platform` is the lowering's: "cpu", "gpu" (CUDA and ROCm) or None for
    any other. `accuracy` "highest": the correctly rounded evaluation for
    float32, bfloat16 and float16 data, in float64 (`_highest`) where the
    platform has it and in float32 arithmetic elsewhere (`_highest32`);
    `inplace`, in two passes at every size, so that XLA can write the
    result over a donated dd (`_rounding`; `_highest32` always takes them). On
    CPUs every NaN of the bfloat16 kernel has its low 16 bits clear once
    beta's is (`canonical_nan`), so the final rounding needs no NaN select:
    about 5% of the bfloat16 loop. On GPUs the half-precision types take
    `sigmoid_times_half_gpu` with XLA's own converts.
    """
    dtype = src.dtype
    cpu = platform == "cpu"
    if accuracy == "highest" and dtype in (np.float32, _BF16, np.float16):
        if platform is None:
            return _sharding.per_shard(_highest32.backward, src, dd, beta)
        evaluation = functools.partial(_highest.backward, inplace=inplace)
        with _wide._float64():
            return _sharding.per_shard(evaluation, src, dd, beta)
    if platform == "gpu" and dtype in (_BF16, np.float16):
        f32 = np.float32
        out = sigmoid_times_half_gpu(
            lax.convert_element_type(src, f32), lax.convert_element_type(dd, f32), beta
        )
        return lax.convert_element_type(out, dtype)
    if dtype == np.float64:
        out = _math64.sigmoid_times(src, dd, beta, fused=cpu and fma_contracts())
        return fusion_fence(out, dd) if cpu else out
    if dtype == np.float32:
        out = sigmoid_times_f32(
            src,
            dd,
            beta,
            compensate=not hints.beta_exact,
            balance=not hints.beta_moderate,
            ftz=cpu,
            fused=cpu and fma_contracts(),
            tiny=hints.beta_tiny,
        )
        if cpu and fma_contracts() and not hints.beta_finite:
            out = _infinite_beta_limits(src, dd, beta, out)
        return fusion_fence(out, dd) if cpu else out
    if dtype == np.float16:
        out = sigmoid_times_f16(to_f32(src), to_f32(dd), beta)
    else:
        beta = canonical_nan(beta) if cpu else beta
        out = sigmoid_times_bf16(to_f32(src), to_f32(dd), beta, ftz=cpu)
    return from_f32(out, dtype, nan_low_bits_clear=cpu)


def softplus_kernel(x, beta, hints, platform=None, *, accuracy=None):
    """(1/beta) log(1 + exp(beta x)) in the data's dtype (the forward
    primitive's lowering); `platform` and `accuracy` as `backward_kernel`'s.

    The CPU's float32 kernel takes the exact product in FMAs where it has
    them; the other platforms' correct the one division (theirs may be 2
    ulp off).
    """
    if accuracy == "highest":
        if platform is None:
            return _sharding.per_shard(_highest32.softplus, x, beta)
        with _wide._float64():
            return _sharding.per_shard(_highest.softplus, x, beta)
    # A Python-float beta in a user's jit is a compile-time constant, and XLA
    # rewrites a division by a constant into a multiplication by its rounded
    # reciprocal: a second rounding (2.16 instead of 1.69 ulp at beta = 0.1)
    # and other bits than an eager call. The barrier keeps beta opaque.
    beta = lax.optimization_barrier(beta)
    if x.dtype == np.float64:
        return _math64.softplus(x, beta)
    balance = not hints.beta_moderate
    if x.dtype == np.float32:
        compensate = not hints.beta_exact
        if platform != "cpu":
            return softplus_f32(
                x, beta, compensate=compensate, balance=balance, ieee_division=False
            )
        fused = compensate and fma_contracts()
        return softplus_f32(
            x, beta, compensate=compensate, balance=balance, fused=fused
        )
    y = softplus_f32(to_f32(x), beta, compensate=False, balance=balance)
    return from_f32(y, x.dtype)
