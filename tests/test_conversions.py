"""The bit-level bf16 <-> f32 conversions used by the lowering are exact
matches of XLA's own converts."""

import jax
import jax.numpy as jnp
import numpy as np

from jax_softplus._math import from_f32, to_f32


def test_bf16_to_f32_matches_astype_on_every_bf16_value():
    every = jnp.asarray(np.arange(1 << 16, dtype=np.uint16).view(jnp.bfloat16))
    ours = jax.jit(to_f32)(every)
    ref = np.asarray(every).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(ours).view(np.uint32), ref.view(np.uint32))


def test_f32_to_bf16_rounds_like_astype():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    # Plus every tie and near-tie pattern around a few exponents, and specials.
    ties = (np.arange(1 << 16, dtype=np.uint32) << 16) | np.uint32(0x8000)
    special = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 3.4e38, -3.4e38, 1e-45])
    values = np.concatenate([bits.view(np.float32), ties.view(np.float32), special])
    ours = np.asarray(jax.jit(lambda v: from_f32(v, jnp.bfloat16))(values))
    with np.errstate(invalid="ignore"):
        ref = values.astype(jnp.bfloat16)
    nan = np.isnan(values)
    assert np.all(np.isnan(ours.astype(np.float32)[nan]))
    np.testing.assert_array_equal(
        ours[~nan].view(np.uint16), np.asarray(ref)[~nan].view(np.uint16)
    )


def test_f16_round_trip_uses_xla_convert():
    v = np.linspace(-70000, 70000, 10001, dtype=np.float32)
    ours = np.asarray(jax.jit(lambda v: from_f32(v, jnp.float16))(v))
    with np.errstate(over="ignore"):
        ref = v.astype(np.float16)
    np.testing.assert_array_equal(ours, ref)
