"""Special inputs, cell by cell: docs/tables/specials.md says what every
derivative returns at +-inf, NaN, -0.0, beta = 0, a subnormal beta (concrete
and traced alike) and an infinite diff_dst; each cell is checked here in
float32 and float64, with beta concrete and traced
(`tools.specials`)."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_softplus import softplus, softplus_backward, softplus_backward_inplace
from tools import specials

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs" / "tables" / "specials.md"


@pytest.mark.exhaustive
@pytest.mark.parametrize("dtype", (np.float32, np.float64), ids=("float32", "float64"))
@pytest.mark.parametrize("table", specials.TABLES, ids=lambda t: t[0])
def test_every_cell_holds(table, dtype):
    fun, _, columns, rows, _ = table
    failures = [
        f"{row.label}, {name}: {'; '.join(fails)}"
        for row, cells in specials.check(fun, columns, rows, dtypes=(dtype,))
        for (_, name), (_, ok, fails) in zip(columns, cells, strict=True)
        if not ok
    ]
    assert not failures, "\n".join(failures)


def test_the_docs_table_is_the_checked_one():
    committed = TABLE.read_text().split("\n\n", 1)[1]
    assert committed == specials.expected_tables()
    assert "Checked on " in TABLE.read_text()


# The cases the issue reported, one by one ------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("src", (-np.inf, np.inf))
def test_beta_derivatives_at_an_infinite_src_are_zero(x64, src):
    # They were NaN: frexp(inf) = (inf, 0) multiplied the zeroed slope.
    for dtype in (jnp.float32, jnp.float64):
        args = (dtype(src), dtype(1.0), dtype(1.5))
        f = jax.grad(softplus_backward, 2)
        assert f(*args) == 0
        assert jax.grad(f, 2)(*args) == 0
        assert jax.grad(f, 0)(*args) == 0
        assert jax.grad(jax.grad(f, 2), 2)(*args) == 0


@pytest.mark.slow
def test_a_masked_element_leaves_a_summed_beta_gradient_exact(x64):
    # softplus(-inf, b) = 0 for every b: one masked activation made the
    # learnable beta's gradient NaN (D_1 computed inf * 0).
    for dtype, exact in ((jnp.float32, -0.5822031), (jnp.float64, -0.5822031088882179)):
        x = jnp.array([-jnp.inf, 1.0, jnp.inf], dtype)

        def loss(b, x=x):
            return softplus(x, b).sum()

        g = jax.grad(loss)(dtype(1.0))
        np.testing.assert_allclose(float(g), exact, rtol=2e-7)
        assert np.isfinite(float(jax.hessian(loss)(dtype(1.0))))


@pytest.mark.parametrize("beta", (6e-39, -1e-40, 1.1e-38))
def test_a_traced_subnormal_beta_is_a_concrete_one(beta):
    # Both are 0: the derivatives' exponent bookkeeping read the bits of a
    # traced one (d/dsrc 1.75e-12 traced, 0 concrete).
    src, dd = jnp.float32(3.0), jnp.float32(1.0)
    for argnum in (0, 1, 2):
        f = jax.grad(softplus_backward, argnum)
        concrete = f(src, dd, beta)
        traced = jax.jit(f)(src, dd, jnp.float32(beta))
        assert concrete == traced == f(src, dd, 0.0), argnum


def test_without_mpmath_the_tool_is_a_one_line_usage_error(monkeypatch, capsys):
    # Every EXACT cell is mpmath's value: refused before any work.
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "mpmath" else find_spec(name, *a),
    )
    monkeypatch.setattr(specials, "tables", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(SystemExit) as exit_:
        specials.main([])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(
        "the specials table needs mpmath, which is not installed: "
        'pip install -e ".[bench]" from a checkout'
    )


# Infinite diff_dst beside products that overflow, and infinite (traced)
# betas: one rule on every platform's evaluation, at both accuracies -------

_MAX32 = float(np.finfo(np.float32).max)
_SRCS = (-_MAX32, -1e38, -1.0, -0.0, 0.0, 1.0, 1e38, _MAX32, -np.inf, np.inf)
_FINITE_BETAS = (2.0, -2.0, 3.5, 3e38, -3e38)


def _expected(s, b, d):
    """The rule, in float64, the limits of finite betas' results: inf *
    sigmoid(t) is inf wherever sigmoid(t) > 0 for finite betas (t = beta *
    src exactly is finite for a finite beta and src), NaN where sigmoid is
    0 there (src = -inf * sign(beta)) or t is NaN (src = 0 at an infinite
    beta: inf * 0); a finite diff_dst at an infinite beta takes sigmoid's
    limits, 1 or 0 by the sign of t."""
    with np.errstate(invalid="ignore", over="ignore"):
        t = np.float64(b) * np.float64(s)
        if np.isnan(t):
            return np.nan
        if np.isinf(d):
            return np.nan if s == -np.inf * np.sign(b) else d
        return d * (1.0 if t > 0 else 0.0)  # an infinite beta: t is +-inf


def _special_cases(dtype):
    """(src, beta, diff_dst, expected) for every src of _SRCS that the dtype
    holds, with an infinite diff_dst at finite betas and any diff_dst at
    infinite betas."""
    info = np.finfo(dtype)
    srcs = [s for s in _SRCS if not np.isfinite(s) or abs(s) <= float(info.max)]
    srcs += [-float(info.max), float(info.max)]
    cases = [(s, b, d) for s in srcs for b in _FINITE_BETAS for d in (np.inf, -np.inf)]
    cases += [
        (s, b, d)
        for s in srcs
        for b in (np.inf, -np.inf)
        for d in (np.inf, -np.inf, 3.0, -2.0)
    ]
    src, beta, dd = (np.array(v) for v in zip(*cases, strict=True))
    want = np.array([_expected(*c) for c in cases])
    return src.astype(dtype), beta.astype(np.float32), dd.astype(dtype), want


def _one_rule_params():
    """Every dtype, platform and accuracy; the default tier runs float32 on
    the CPU (seconds each: HIGHEST's and the TPU's programs compile long)."""
    for dtype, name in (
        (np.float32, "f32"),
        (jnp.bfloat16, "bf16"),
        (np.float16, "f16"),
    ):
        for platform in ("cpu", "cuda", "tpu"):
            for accuracy in (None, jax.lax.AccuracyMode.HIGHEST):
                slow = (name, platform, accuracy) != ("f32", "cpu", None)
                yield pytest.param(
                    dtype,
                    platform,
                    accuracy,
                    id=f"{name}-{platform}-{accuracy}",
                    marks=[pytest.mark.slow] if slow else [],
                )


@pytest.mark.parametrize(("dtype", "platform", "accuracy"), list(_one_rule_params()))
def test_infinite_diff_dst_and_infinite_betas_follow_one_rule(
    dtype, platform, accuracy
):
    from jax_softplus.testing import lowered_as

    src, beta, dd, want = _special_cases(dtype)
    op = jax.vmap(lambda s, d, b: softplus_backward(s, d, b, accuracy=accuracy))
    with lowered_as(platform):
        got = np.asarray(jax.jit(op)(src, dd, beta), np.float64)
        finite_beta = np.isfinite(beta)
        scalar = np.asarray(
            [
                softplus_backward(
                    dtype(src[i]), dtype(dd[i]), jnp.float32(beta[i]), accuracy=accuracy
                )
                for i in np.flatnonzero(finite_beta)[:8]
            ],
            np.float64,
        )
    nan = np.isnan(want)
    bad = np.flatnonzero((np.isnan(got) != nan) | (~nan & (got != want)))
    assert not bad.size, [
        (float(src[i]), float(beta[i]), float(dd[i]), got[i], want[i]) for i in bad[:6]
    ]
    # Eager calls and the in-place op give the batch's bits.
    np.testing.assert_array_equal(scalar, got[np.flatnonzero(finite_beta)[:8]])
    with lowered_as(platform):
        for b in _FINITE_BETAS:
            at = np.flatnonzero(beta == np.float32(b))
            out = softplus_backward_inplace(
                jnp.asarray(src[at]), jnp.array(dd[at]), b, accuracy=accuracy
            )
            np.testing.assert_array_equal(np.asarray(out, np.float64), got[at], str(b))
