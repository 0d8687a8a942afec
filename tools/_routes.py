"""The library's derivatives of every order, by every route of JAX autodiff.

A quantity is (function, (p, q, r)): d^p/dx^p d^q/dbeta^q d^r/ddd^r of
"softplus"(x, beta) or "backward" = softplus_backward(x, dd, beta), per
element. Routes: "grad" (reverse to every order), "jvp" (forward),
"jvp_of_grad" (forward over reverse), "grad_of_jvp", and for order 2
"hessian" and "jacfwd_jacrev". Shared by the accuracy tool and the tests.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jax_softplus import softplus, softplus_backward

ROUTES = ("grad", "jvp", "jvp_of_grad", "grad_of_jvp", "hessian", "jacfwd_jacrev")

# Arguments of the scalar functions: softplus(x, b), softplus_backward as
# g(s, b, d); a quantity (p, q, r) is d^p/ds^p d^q/db^q d^r/dd^r.
FUNCTIONS = {
    "softplus": lambda x, b, d: softplus(x, b),
    "backward": lambda s, b, d: softplus_backward(s, d, b),
}


def _argnums(p, q, r):
    return [0] * p + [1] * q + [2] * r


def _reverse(f, argnum):
    return jax.grad(f, argnum)


def _forward(f, argnum):
    def df(*args):
        def along(v):
            return f(*args[:argnum], v, *args[argnum + 1 :])

        return jax.jvp(along, (args[argnum],), (jnp.ones_like(args[argnum]),))[1]

    return df


_ROUTES = {
    "grad": lambda f, nums: _nest(f, nums, [_reverse] * len(nums)),
    "jvp": lambda f, nums: _nest(f, nums, [_forward] * len(nums)),
    # forward over reverse: the innermost derivative reverse, the rest forward.
    "jvp_of_grad": lambda f, nums: _nest(
        f, nums, [_reverse] + [_forward] * (len(nums) - 1)
    ),
    # reverse over forward.
    "grad_of_jvp": lambda f, nums: _nest(
        f, nums, [_forward] + [_reverse] * (len(nums) - 1)
    ),
}


def _nest(f, nums, rules):
    for num, rule in zip(nums, rules, strict=True):
        f = rule(f, num)
    return f


def _hessian_route(kind, f, nums):
    """The order-2 entry nums of jax.hessian or jacfwd(jacrev)."""
    if kind == "hessian":
        return lambda *a: jax.hessian(f, (0, 1, 2))(*a)[nums[1]][nums[0]]
    return lambda *a: jax.jacfwd(jax.jacrev(f, (0, 1, 2)), (0, 1, 2))(*a)[nums[1]][
        nums[0]
    ]


def derivative(fun, pqr, route, functions=None):
    """The scalar function (x, beta, dd) -> the derivative `pqr` of `fun`
    ("softplus" or "backward", or a key of `functions`) by `route`."""
    f = (functions or FUNCTIONS)[fun]
    nums = _argnums(*pqr)
    if route in _ROUTES:
        return _ROUTES[route](f, nums)
    return _hessian_route(route, f, nums)


@functools.cache
def compiled(route, quantities, functions=None):
    """One jit of per-element derivatives, vectorised over (x, dd) with one
    beta: `quantities` a tuple of (name, function, (p, q, r)); returns
    {name: values}. `functions` (a hashable tuple of (name, f) pairs) adds
    functions of (x, beta, dd) beside "softplus" and "backward"."""
    table = {**FUNCTIONS, **dict(functions or ())}
    funs = {name: derivative(fun, pqr, route, table) for name, fun, pqr in quantities}

    def all_of(x, b, d):
        return {name: f(x, b, d) for name, f in funs.items()}

    return jax.jit(jax.vmap(all_of, (0, None, 0)))
