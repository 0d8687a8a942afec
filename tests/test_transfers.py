"""Transfers: eager calls keep beta on the device, as JAX's own ops do.

Under `jax.transfer_guard("disallow")` every implicit host-device transfer
raises; `jax.nn.celu(x)` and `jax.nn.celu(x, alpha)` with a device `alpha`
pass, and so must the library's entry points.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import DTYPES, FORWARD_MODE, dtype_id

from jax_softplus import (
    softplus,
    softplus_backward,
    softplus_backward_inplace,
)

X = np.linspace(-6, 6, 64, dtype=np.float32)
G = np.cos(X)


def _entry_points(dtype):
    """name -> call(beta), with fresh operands for the donating one."""
    x, g = jnp.asarray(X, dtype), jnp.asarray(G, dtype)
    return {
        "softplus": lambda *b: softplus(x, *b),
        "softplus_backward": lambda *b: softplus_backward(x, g, *b),
        "softplus_backward_inplace": lambda *b: softplus_backward_inplace(
            x, jnp.array(g, copy=True), *b
        ),
    }


BETAS = {
    "default": (),
    "python float": (1.7,),
    "numpy float32": (np.float32(1.7),),
    "device float32": (jnp.float32(1.7),),
    "device int32": (jnp.int32(2),),
    "device bfloat16": (jnp.asarray(1.7, jnp.bfloat16),),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("beta", BETAS, ids=str)
def test_eager_calls_make_no_implicit_transfer(dtype, beta):
    for name, call in _entry_points(dtype).items():
        want = np.asarray(call(*BETAS[beta]))  # also warms the caches up
        with jax.transfer_guard("disallow"):
            # Failed with "Disallowed host-to-device transfer" when the
            # checked beta went to every call as a host scalar.
            got = call(*BETAS[beta]).block_until_ready()
        np.testing.assert_array_equal(np.asarray(got), want, err_msg=name)
        # Uncommitted data, uncommitted result, as with a host scalar (a
        # committed copy of beta on the data's device made it committed).
        assert not got.committed, name


@pytest.mark.skipif(not FORWARD_MODE, reason="reverse mode only on JAX 0.8")
@pytest.mark.parametrize("beta", BETAS, ids=str)
def test_an_eager_jvp_makes_no_implicit_transfer(beta):
    # As jax.jvp of jax.nn.softplus: the rules run on the device copy of a
    # checked beta (a host scalar went to every call's jit before).
    x, t = jnp.asarray(X), jnp.asarray(G)

    def jvp():
        return jax.jvp(lambda x: softplus(x, *BETAS[beta]), (x,), (t,))

    want = [np.asarray(v) for v in jvp()]
    with jax.transfer_guard("disallow"):
        jax.jvp(jax.nn.softplus, (x,), (t,))  # the same guard passes JAX's own
        got = jvp()
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g), w)


def test_a_new_beta_value_is_placed_explicitly():
    # First sight of a value: the read-back of a device beta and the copy
    # of a Python float to the device are explicit transfers, which
    # "disallow" allows (it refuses only implicit ones).
    x, beta = jnp.asarray(X), jnp.float32(2.345)
    with jax.transfer_guard("disallow"):
        a = softplus(x, 1.2345)
        b = softplus(x, beta)
    np.testing.assert_array_equal(a, softplus(X, 1.2345))
    np.testing.assert_array_equal(b, softplus(X, 2.345))


def test_a_subnormal_device_beta_is_passed_as_zero():
    # The check flushes it to 0, as XLA does on the CPU; a GPU keeps
    # subnormals, so there the device array itself would give other bits.
    x, g = jnp.asarray(X), jnp.asarray(G)
    tiny = jnp.asarray(np.float32(1e-40))
    with jax.transfer_guard("disallow"):
        out = softplus_backward(x, g, tiny)
    np.testing.assert_array_equal(out, 0.5 * G)


def test_a_zero_d_diff_dst_passed_as_beta_too():
    # Donated and read as beta by one call: the runtime refuses that, so
    # beta must be a copy of the value, not diff_dst's buffer.
    g = jnp.float32(0.75)
    out = softplus_backward_inplace(jnp.float32(1.0), g, g)
    assert g.is_deleted()
    np.testing.assert_allclose(out, 0.75 / (1 + np.exp(-0.75)), rtol=1e-6)


def test_a_device_beta_can_still_be_donated():
    # Reading beta back must leave no NumPy view on it (JAX 0.11 keeps one
    # from jax.device_get on the CPU), or a later jit could not donate it.
    beta = jnp.array(1.3, jnp.float32) * 1  # a buffer of its own
    softplus(jnp.asarray(X), beta)
    jax.jit(lambda b: b * 2, donate_argnums=0)(beta)
    assert beta.is_deleted()


def test_a_committed_device_beta_commits_the_result():
    # Passed as it is, it commits the result, as it does for x * beta and
    # jax.nn.celu(x, beta) (docs/sharp_bits.md); a copy would not.
    beta = jax.device_put(jnp.float32(1.7), jax.devices()[0])
    assert beta.committed
    for dtype in DTYPES:
        for name, call in _entry_points(dtype).items():
            got = call(beta)
            assert got.committed, (name, dtype)
            np.testing.assert_array_equal(got, call(1.7), err_msg=name)
