"""The derivative families' static structure, in exact arithmetic.

Every derivative of the ops is a sum of two families (`_derivatives`):
combinations dd * sum c src**i beta**j s^(n)(t), s the sigmoid, and
D_k = d^k softplus / d beta^k. Their evaluations (`_wide` in float64,
`_narrow` in the compute dtype) share what is computed here once per
order, in Python: the polynomial that gives s^(n) from w = s(t) s(-t) and
tau = tanh(t / 2), the series of tanh, and the combination that D_k is
made of.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction


@functools.cache
def slope_polynomial(n):
    """s^(n) = w * (A(w) + tau * B(w)) for n >= 1, w = s(t) s(-t) = s'(t),
    tau = tanh(t / 2); returns the coefficients of A and B, lowest first.

    From s'' = -w tau and d tau / dt = 2 w: for p = sum c w**a tau**b,
    p_(n+1) = -tau p - w tau dp/dw + 2 w dp/dtau, reduced by
    tau**2 = 1 - 4 w. A zero of A + tau B is a zero of s^(n) itself, so its
    evaluation cancels only where the derivative does.
    """
    p = {(0, 0): 1}
    for _ in range(n - 1):
        q = {}
        for (a, b), c in p.items():
            for key, value in (((a, b + 1), -c * (1 + a)), ((a + 1, b - 1), 2 * b * c)):
                if value:
                    q[key] = q.get(key, 0) + value
        p = {}
        for (a, b), c in q.items():
            if b == 2:  # tau**2 = 1 - 4 w (b is at most 2 here)
                b = 0
                p[(a + 1, 0)] = p.get((a + 1, 0), 0) - 4 * c
            p[(a, b)] = p.get((a, b), 0) + c
    degree = max(a for a, _ in p) + 1
    return tuple(tuple(p.get((a, b), 0) for a in range(degree)) for b in (0, 1))


def _bernoulli(count):
    """B_0 .. B_(count-1), exactly (Akiyama-Tanigawa)."""
    out, row = [], []
    for m in range(count):
        row.append(Fraction(1, m + 1))
        for j in range(m, 0, -1):
            row[j - 1] = j * (row[j - 1] - row[j])
        out.append(row[0])
    return out


@functools.cache
def _tanh_coefficients(terms):
    b = _bernoulli(2 * terms + 1)
    return tuple(
        2 ** (2 * n) * (2 ** (2 * n) - 1) * b[2 * n] / math.factorial(2 * n)
        for n in range(1, terms + 1)
    )


@functools.cache
def tanh_series(terms):
    """Coefficients of tanh(y) = sum c_n y**(2n-1), n = 1..terms."""
    return tuple(float(c) for c in _tanh_coefficients(terms))


@functools.cache
def tanh_coefficient_word(n, dtype):
    """c_n of `tanh_series` as a double word (hi, lo) of `dtype` (a NumPy
    dtype)."""
    exact = _tanh_coefficients(n)[n - 1]
    hi = dtype.type(exact)
    return float(hi), float(dtype.type(exact - Fraction(float(hi))))


def dbeta_terms(k):
    """D_k = (combination) + gamma beta**(1-k) D_1: from
    beta D_k + k D_(k-1) = x**k s^(k-1)(t), D_1 the base. Returns the
    combination's terms (c, n, i, j) and gamma."""
    terms, gamma = (), 1
    for order in range(2, k + 1):
        terms = ((1, order - 1, order, -1),) + tuple(
            (-order * c, n, i, j - 1) for c, n, i, j in terms
        )
        gamma = -order * gamma
    return terms, gamma
