"""Both ops against their float64 references, every dtype, many betas.

The bound per dtype is `helpers.ULP_BOUND` (float32 2.5 ulp; half types
within 1 ulp of the correctly rounded value), wherever the exact result is
normal. The bands and corners of each op are in test_forward.py and
test_backward.py.
"""

import numpy as np
import pytest
from helpers import (
    BETAS,
    DTYPES,
    ULP_BOUND,
    backward_ref,
    dtype_id,
    max_ulp,
    random_dd,
    random_src,
    seed_of,
    softplus_ref,
)

from jax_softplus import softplus, softplus_backward

N = 20_000


def _forward(rng, beta, dtype):
    x = random_src(rng, N, beta, dtype, (-40.0, 40.0))
    return softplus(x, beta), softplus_ref(x, beta)


def _backward(rng, beta, dtype):
    src = random_src(rng, N, beta, dtype)
    dd = random_dd(rng, N, dtype)
    return softplus_backward(src, dd, beta), backward_ref(src, dd, beta)


CASES = [("softplus", _forward, beta) for beta in (*BETAS, 1.7, 0.1, 7.3)]
# beta = 0 is legal for the backward op only (0.5 * diff_dst).
CASES += [("softplus_backward", _backward, beta) for beta in (*BETAS, 0.0, 1.7, 0.1)]


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize(
    ("op", "run", "beta"), CASES, ids=[f"{op}-{beta}" for op, _, beta in CASES]
)
def test_matches_float64_reference(op, run, beta, dtype):
    rng = np.random.default_rng(seed_of(np.dtype(dtype).name, beta, op))
    got, ref = run(rng, beta, dtype)
    assert got.dtype == dtype and got.shape == ref.shape
    err = max_ulp(got, ref, dtype)
    assert err <= ULP_BOUND[np.dtype(dtype)], (op, err)
