"""Float64 references, ulp measurement and per-dtype tolerances."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tools._references import backward_ref, softplus_ref, ulp_error

__all__ = [
    "FORWARD_MODE",
    "SLOW_HIGHEST",
    "dtype_id",
    "examples",
    "seed_of",
    "run_on_eight_devices",
    "BETAS",
    "EXTREME_BETAS",
    "DTYPES",
    "ULP_BOUND",
    "backward_ref",
    "f64",
    "max_ulp",
    "random_dd",
    "random_src",
    "softplus_ref",
    "ulp_error",
]

DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)
# HIGHEST as a parameter of the slow tier (each of its programs takes
# seconds to compile); the default tier runs such a test at the default
# accuracy, and tests/test_highest.py holds HIGHEST there.
SLOW_HIGHEST = pytest.param(
    jax.lax.AccuracyMode.HIGHEST,
    marks=pytest.mark.slow,
    id=str(jax.lax.AccuracyMode.HIGHEST),
)
BETAS = (1.0, 0.5, 3.0, -1.0, -2.5)
# Betas whose t of order 1 needs a tiny or a huge operand.
EXTREME_BETAS = (3e38, -1e35, 2.0**70, 2.0**-70, -1e-35, 1.2e-38)

# Max error in ulps of the result's dtype, wherever the exact result is a
# normal number, LOWEST_ULPS above the smallest or more (`ulp_error`). f32:
# the bound of the numerics issue (2.5); half types: within 1 ulp of the
# correctly rounded value.
ULP_BOUND = {
    np.dtype(jnp.float32): 2.5,
    np.dtype(jnp.bfloat16): 1.0,
    np.dtype(jnp.float16): 1.0,
    np.dtype(jnp.float64): 4.0,
}


def examples(n: int) -> int:
    """Hypothesis examples for a costly test: n by default, 3n in CI's
    profile (`JAX_SOFTPLUS_HYPOTHESIS=ci`, tests/conftest.py); cheap tests
    take the profile's own count."""
    import os

    return 3 * n if os.environ.get("JAX_SOFTPLUS_HYPOTHESIS") == "ci" else n


def dtype_id(dtype) -> str:
    """pytest id of a dtype parameter: its name ("float32", "bfloat16")."""
    return np.dtype(dtype).name


def seed_of(*parts) -> int:
    """A fixed seed from a test's parameters: the same on every run (Python
    salts its string hashes per process, so hash() would not replay)."""
    import zlib

    return zlib.crc32(repr(parts).encode())


def run_on_eight_devices(*args: str, timeout: float):
    """Run `python *args` with 8 forced host devices, importing this
    checkout's jax_softplus; the device count is fixed when a process first
    initialises JAX, hence the subprocess. Fails with its stderr if it fails.
    """
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def f64(x) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # a signaling NaN quiets on the way
        return np.asarray(x).astype(np.float64)


def max_ulp(got, ref, dtype) -> float:
    err = ulp_error(got, ref, dtype)
    return float(err.max()) if err.size else 0.0


def random_src(rng, n, beta, dtype, t_range=(-30.0, 30.0)):
    """src values whose beta * src spans t_range, rounded to dtype."""
    t = rng.uniform(*t_range, n)
    b = beta if beta != 0 else 1.0
    with np.errstate(over="ignore"):  # an extreme beta: beyond float32 is inf
        return jnp.asarray((t / b).astype(np.float32), dtype)


def random_dd(rng, n, dtype, scale=1.0):
    mag = scale * np.exp(rng.uniform(-2.0, 2.0, n))
    sign = rng.choice([-1.0, 1.0], n)
    return jnp.asarray((mag * sign).astype(np.float32), dtype)


def _forward_mode() -> bool:
    """Whether `softplus` has forward mode under this JAX (0.9 and newer:
    its HiPrim), read off the public op: JAX 0.8's custom_vjp refuses jvp."""
    from jax_softplus import softplus

    try:
        jax.jvp(softplus, (1.0,), (1.0,))
    except TypeError:
        return False
    return True


FORWARD_MODE = _forward_mode()
