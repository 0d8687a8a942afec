"""Run in a subprocess with 8 forced host devices by tests/test_sharding.py.

Prints one JSON object of facts for the test to assert on.
"""

import json
import os

assert "xla_force_host_platform_device_count=8" in os.environ.get("XLA_FLAGS", "")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from jax_softplus import softplus, softplus_backward, softplus_backward_inplace  # noqa: E402
from jax_softplus._compat import shard_map  # noqa: E402

COLLECTIVES = ("all-gather", "all-reduce", "all-to-all", "collective-permute",
               "reduce-scatter")  # fmt: skip
facts = {"devices": jax.device_count()}
mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model"))
sharding = NamedSharding(mesh, P("data", "model"))
x = jax.device_put(jnp.linspace(-5, 5, 64 * 32).reshape(64, 32), sharding)
g = jax.device_put(jnp.ones((64, 32)), sharding)

# 1. jit: output keeps the input's sharding, no collective in the HLO.
f = jax.jit(softplus_backward)
out = f(x, g, 1.7)
hlo = f.lower(x, g, 1.7).compile().as_text()
facts["out_sharding_matches"] = out.sharding.is_equivalent_to(sharding, out.ndim)
facts["collectives"] = [c for c in COLLECTIVES if c in hlo]
facts["jit_matches_unsharded"] = bool(
    np.array_equal(
        np.asarray(out),
        np.asarray(softplus_backward(np.asarray(x), np.asarray(g), 1.7)),
    )
)
fwd = jax.jit(lambda x: softplus(x, 1.7))
facts["forward_collectives"] = [
    c for c in COLLECTIVES if c in fwd.lower(x).compile().as_text()
]
facts["forward_sharding_matches"] = fwd(x).sharding.is_equivalent_to(sharding, 2)
# Eager calls run the library's own jits: the sharding carries through them
# too, with the jitted bits.
eager_fwd, eager_bwd = softplus(x, 1.7), softplus_backward(x, g, 1.7)
facts["eager_sharding_matches"] = all(
    a.sharding.is_equivalent_to(sharding, 2) for a in (eager_fwd, eager_bwd)
)
facts["eager_matches_jit"] = bool(
    np.array_equal(np.asarray(eager_fwd), np.asarray(fwd(x)))
    and np.array_equal(np.asarray(eager_bwd), np.asarray(out))
)

# 2. shard_map.
sm = jax.jit(shard_map(lambda a, b: softplus_backward(a, b, 1.7), mesh=mesh,
                       in_specs=(P("data", "model"), P("data", "model")),
                       out_specs=P("data", "model")))  # fmt: skip
facts["shard_map_matches"] = bool(np.array_equal(np.asarray(sm(x, g)), np.asarray(out)))

# 3. Donation of a sharded array.
dd = jax.device_put(jnp.ones((64, 32)), sharding)
res = softplus_backward_inplace(x, dd, 1.7)
facts["donated_deleted"] = dd.is_deleted()
facts["donated_out_sharding_matches"] = res.sharding.is_equivalent_to(sharding, 2)

# 4. Data-parallel training: the loss falls. Each step is blocked on: with
# several steps in flight jaxlib 0.10.2 can deadlock in the all-reduce
# rendezvous on a 2-core host (see docs/sharp_bits.md).
dp = NamedSharding(mesh, P(("data", "model")))
rep = NamedSharding(mesh, P())
key = jax.random.PRNGKey(0)
xs = jax.random.normal(key, (256, 8))
ys = 0.5 * xs[:, :1] - xs[:, 1:2]
xs, ys = jax.device_put(xs, dp), jax.device_put(ys, dp)
params = jax.device_put(
    {"w1": jax.random.normal(key, (8, 32)) * 0.1, "w2": jnp.zeros((32, 1))}, rep
)


def loss_fn(p, x, y):
    h = softplus(x @ p["w1"], 1.5)
    return jnp.mean((h @ p["w2"] - y) ** 2)


@jax.jit
def train_step(p, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
    return jax.tree.map(lambda a, b: a - 0.1 * b, p, grads), loss


losses = []
for _ in range(60):
    params, loss = train_step(params, xs, ys)
    losses.append(float(jax.block_until_ready(loss)))
facts["losses"] = [losses[0], losses[-1]]
print(json.dumps(facts))
