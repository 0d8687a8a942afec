"""Taylor-mode rules for `jax.experimental.jet`.

jet propagates truncated Taylor series: an input x(t) = x0 + c1 t + ... +
cK t**K gives the output's coefficients y_k = (d/dt)**k op(x(t)) / k! at
t = 0. The ops are not polynomials, so each coefficient is computed from the
ops' own derivative rules: K nested `jax.jvp`s along the path t -> x(t),
2**K evaluations for order K (jet is used at small orders).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def _derivatives(path, order):
    """[path(0), path'(0), ..., path^(order)(0)] for a function of a scalar t."""

    def upto(n):
        if n == 0:
            return lambda t: [path(t)]
        inner = upto(n - 1)

        def outer(t):
            values, slopes = jax.jvp(inner, (t,), (jnp.ones_like(t),))
            return [values[0], *slopes]

        return outer

    return upto(order)(jnp.zeros((), jnp.float32))


def taylor_rule(op):
    """A jet rule for `op(*operands)`, elementwise in its operands."""

    def rule(primals_in, series_in, **params):
        order = len(series_in[0])

        def path(t):
            operands = []
            for x0, coefficients in zip(primals_in, series_in, strict=True):
                x0 = jnp.asarray(x0)
                tt = t.astype(x0.dtype)
                x = x0
                for k, c in enumerate(coefficients, start=1):
                    x = x + c * tt**k
                operands.append(x)
            return op(*operands, **params)

        value, *derivatives = _derivatives(path, order)
        series = [d / math.factorial(k) for k, d in enumerate(derivatives, start=1)]
        return value, series

    return rule


def register(prim, op) -> None:
    """Register `taylor_rule(op)` for `prim`, where jet is installed."""
    try:
        from jax.experimental import jet
    except ImportError:  # pragma: no cover - future JAX
        return
    jet.jet_rules[prim] = taylor_rule(op)
