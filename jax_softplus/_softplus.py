"""The forward op, `softplus`: its derivative rules bind the primitive (a
HiPrim on JAX 0.9+, a `jax.custom_vjp` on JAX 0.8)."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax
from jax.custom_derivatives import SymbolicZero
from jax.interpreters import ad
from jax.typing import ArrayLike

from jax_softplus import _compat, _dispatch, _forward, _jet, _sharding, _validate
from jax_softplus._derivatives import dsoftplus_dbeta
from jax_softplus._derivatives import is_zero as _is_zero
from jax_softplus._primitive import batch_operands, bind
from jax_softplus._validate import Accuracy

# Inside a trace the kernel is a jit of its own: one named call in the jaxpr.
_softplus_kernel = jax.jit(_forward.value, static_argnames=("hints", "accuracy"))


def _tangent_terms(static, x, beta, x_dot, beta_dot, dbeta=None):
    """The terms of d softplus = sigma(beta x) x_dot + (d softplus / d beta)
    beta_dot that are not zero.

    The x term is the backward op with diff_dst = x_dot (linear in it, so
    `jax.linearize` transposes it to one bind), at the value's accuracy;
    `dbeta` is `dsoftplus_dbeta`'s value when the caller already has it.
    `static` is (hints, accuracy).
    """
    hints, accuracy = static
    terms = []
    if not _is_zero(x_dot):
        terms.append(bind(x, x_dot, beta, hints, accuracy))
    if not _is_zero(beta_dot):
        dbeta = dsoftplus_dbeta(1, hints, x, beta) if dbeta is None else dbeta
        terms.append((dbeta * beta_dot).astype(x.dtype))
    return terms


def _total(x, terms):
    return sum(terms[1:], terms[0]) if terms else jnp.zeros_like(x)


def _tangent(static, x, beta, x_dot, beta_dot, dbeta=None):
    """d softplus (`_tangent_terms`), summed."""
    return _total(x, _tangent_terms(static, x, beta, x_dot, beta_dot, dbeta))


# `static` is (hints, accuracy) throughout: what a concrete beta tells the
# kernels, and which evaluation the value and its backward op take.
def _softplus_value(static, x, beta):
    """softplus's value: its primitive in a jit of its own (one named call in
    a jaxpr, one device call eagerly)."""
    hints, accuracy = static
    return _softplus_kernel(x, beta, hints=hints, accuracy=accuracy)


def _sum_to(ct, beta):
    """A per-element cotangent summed to beta's shape (0-d, or the data's)."""
    return jnp.sum(ct) if beta.ndim == 0 else ct


# Forward and reverse mode: a HiPrim (JAX 0.9+) ------------------------------

if _compat.HiPrim is not None:

    class _Softplus(_compat.HiPrim):
        """`softplus` as a JAX primitive with rules of its own.

        Reverse mode is a custom VJP (`vjp_fwd`/`vjp_bwd_retval`: the x
        cotangent is one `softplus_backward` bind, d/d beta is computed only
        where beta is perturbed); forward mode is `jvp`, and `lin` /
        `linearized` for `jax.linearize`. Operands `(x, beta)`, beta 0-d or,
        under `vmap` with a per-example beta, of x's shape.
        """

        skip_linearization_on_zero_tangents = True  # JAX 0.11+

        def __init__(self, x_aval, beta_aval, static):
            self.in_avals = (x_aval, beta_aval)
            self.out_aval = x_aval
            self.params = {"hints": static[0], "accuracy": static[1]}
            super().__init__()

        @property
        def static(self):
            return self.hints, self.accuracy

        def expand(self, x, beta):
            return _softplus_kernel(x, beta, hints=self.hints, accuracy=self.accuracy)

        def vjp_fwd(self, nzs_in, x, beta):
            beta = _placed(x, beta)
            y = _softplus_value(self.static, x, beta)
            # The residuals' structure carries whether beta needs a cotangent.
            return y, (x, beta, beta if nzs_in[1] else None)

        def vjp_bwd_retval(self, res, g):
            x, beta, beta_perturbed = res
            if _is_zero(g):
                return _zero_like(x), _zero_like(beta)
            dx = bind(x, g, beta, self.hints, self.accuracy)
            if beta_perturbed is None:
                return dx, _zero_like(beta)
            dbeta = g.astype(beta.dtype) * dsoftplus_dbeta(1, self.hints, x, beta)
            return dx, _sum_to(dbeta, beta)

        def jvp(self, primals, tangents):
            x, beta = primals
            if _eager(*primals, *tangents):
                # An eager jax.jvp: value and tangent in one jitted call, as
                # a jitted function's JVP is. A nested one keeps the rules
                # op by op, which compile nothing per level of nesting.
                zeros = tuple(_is_zero(t) for t in tangents)
                dots = [0.0 if z else t for z, t in zip(zeros, tangents, strict=True)]
                beta = _placed(x, beta)
                y, terms = _value_and_terms(
                    x, beta, *dots, static=self.static, zeros=zeros
                )
                # Summed here as elsewhere, not contracted into an FMA in
                # the jit: the bits of every other route.
                return y, _total(x, terms)
            y = _softplus_value(self.static, x, beta)
            return y, _tangent(self.static, x, beta, *tangents)

        def lin(self, nzs_in, x, beta):
            beta = _placed(x, beta)
            y = _softplus_value(self.static, x, beta)
            dbeta = dsoftplus_dbeta(1, self.hints, x, beta) if nzs_in[1] else None
            return y, (x, beta, dbeta)

        def linearized(self, res, x_dot, beta_dot):
            x, beta, dbeta = res
            return _tangent(self.static, x, beta, x_dot, beta_dot, dbeta)

        def batch(self, axis_data, args, dims):
            # Elementwise, as the backward op: bound again on aligned operands.
            del axis_data
            (x, beta), axis = batch_operands(args, dims)
            return _bind_hi(x, beta, self.static), axis

    def _zero_like(v):
        return _compat.HiZero(jax.typeof(v).to_tangent_aval())

    def _placed(x, beta):
        """beta where a rule runs on a concrete x at the top level (an eager
        `jax.grad`, `jax.jvp`, `jax.linearize`): a checked host scalar as
        the device copy that eager calls keep (`_dispatch.eager_beta`), not
        copied again by each call (~30 us)."""
        if not isinstance(beta, jax.Array) and _dispatch.is_eager(x):
            return _dispatch.eager_beta(float(beta), x.dtype, True, x)[0]
        return beta

    def _eager(*values):
        """Whether a rule runs at the top level on concrete values (symbolic
        zero tangents aside)."""
        live = [v for v in values if not _is_zero(v)]
        return _compat.trace_state_clean() and not any(map(_compat.is_tracer, live))

    @partial(jax.jit, static_argnames=("static", "zeros"))
    def _value_and_terms(x, beta, x_dot, beta_dot, *, static, zeros):
        x_dot = _zero_like(x) if zeros[0] else x_dot
        beta_dot = _zero_like(beta) if zeros[1] else beta_dot
        terms = _tangent_terms(static, x, beta, x_dot, beta_dot)
        return _softplus_value(static, x, beta), terms

    def _bind_hi(x, beta, static):
        return _Softplus(jax.typeof(x), jax.typeof(beta), static)(x, beta)

    _compat.register_hi_nan_check(_Softplus)


# Reverse mode only: jax.custom_vjp (JAX 0.8) --------------------------------


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def _softplus(static, x, beta):
    return _softplus_value(static, x, beta)


def _softplus_fwd(static, x, beta):
    y = _softplus_value(static, x.value, beta.value)
    # The residuals' structure carries whether beta needs a cotangent.
    return y, (x.value, beta.value, beta.value if beta.perturbed else None)


def _softplus_bwd(static, res, g):
    hints, accuracy = static
    x, beta, beta_perturbed = res
    if type(g) is SymbolicZero:
        return None, None
    dx = bind(x, g, beta, hints, accuracy)
    if beta_perturbed is None:
        return dx, None
    return dx, jnp.sum(g.astype(beta.dtype) * dsoftplus_dbeta(1, hints, x, beta))


_softplus.defvjp(_softplus_fwd, _softplus_bwd, symbolic_zeros=True)


# JAX 0.8's eager shard_map runs no custom_vjp with symbolic zeros: there,
# one that always computes the beta cotangent (unused ones are dead code
# under jit).
@partial(jax.custom_vjp, nondiff_argnums=(0,))
def _softplus_dense(static, x, beta):
    return _softplus_value(static, x, beta)


def _softplus_dense_fwd(static, x, beta):
    return _softplus_value(static, x, beta), (x, beta)


def _softplus_dense_bwd(static, res, g):
    x, beta = res
    return _softplus_bwd(static, (x, beta, beta), g)


_softplus_dense.defvjp(_softplus_dense_fwd, _softplus_dense_bwd)

#: How `softplus` is differentiated under the installed JAX: "hiprim"
#: (reverse and forward mode) or "custom_vjp" (reverse mode only).
MECHANISM = "custom_vjp" if _compat.HiPrim is None else "hiprim"


def softplus(
    x: ArrayLike, beta: ArrayLike = 1.0, *, accuracy: Accuracy = None
) -> jax.Array:
    """SoftPlus: (1 / beta) * log(1 + exp(beta * x)).

    Computed as [beta * x > 0] * x + log1p(exp(-|beta * x|)) / beta: it
    never overflows and keeps full relative accuracy where beta * x << 0.
    float32 is within 2.5 ulp of the exact value for any beta, float64 within
    1 ulp; bfloat16, float16 and the float8 and float4 types are computed in
    float32 and rounded once (docs/accuracy.md has the bounds and how they
    were found).

    A drop-in for `jax.nn.softplus` (beta = 1): integers and bools promote
    to the default float dtype and a weakly typed input gives a weakly typed
    result, as there. Its reverse mode is a custom VJP whose backward pass
    binds `softplus_backward_p` once for `x`. When `beta` is differentiated
    too, it gets d softplus / d beta = -(a * sigmoid(-a) + log1p(exp(-a))) /
    beta**2 with a = |beta * x|, summed over `x`: no cancellation. When it is
    not, that cotangent costs nothing. Forward mode (`jax.jvp`,
    `jax.jacfwd`, `jax.linearize`) works on JAX 0.9 and newer and gives the
    bits of reverse mode; on JAX 0.8, where the op is a `jax.custom_vjp`,
    forward mode fails (docs/sharp_bits.md says how), while `jax.hessian`
    works on both.

    Args:
      x: an array of float32, bfloat16, float16, float8 or float4 (float64
        with `jax_enable_x64`), or of integers or bools, promoted as by
        `jax.nn.softplus`; a Python or NumPy scalar, or a NumPy array. A
        complex x is computed as `jax.nn.softplus` computes it,
        `jnp.logaddexp(beta * x, 0) / beta`, differentiated by JAX, with
        that formula's accuracy (docs/sharp_bits.md).
      beta: a nonzero real scalar, default 1.0; it may be traced and
        differentiated.
      accuracy: keyword-only, as in `jax.lax`. None or
        `jax.lax.AccuracyMode.DEFAULT`: the default kernel.
        `jax.lax.AccuracyMode.HIGHEST`: the correctly rounded value (round
        to nearest even of the exact value) for float32, bfloat16 and
        float16 `x`, evaluated in float64 (on TPUs, which have none, in float32
        double words), and the backward op at HIGHEST as its VJP; float64 and
        the narrower float types take the default kernel. A
        `jax.lax.Tolerance`: the cheapest of the two whose bound meets it.

    Returns:
      An array of the shape of `x` and of its (promoted) dtype, weakly
        typed where `x` is.

    Raises:
      TypeError: a non-numeric `x`, a `beta` that is not real, or an
        `accuracy` that is none of the above.
      ValueError: a non-scalar `beta`; a concrete `beta` that is 0, NaN,
        infinite or beyond the range of the compute dtype (float32, or
        float64 for float64 `x`); a `jax.lax.Tolerance` that no evaluation
        meets, or a HIGHEST accuracy for complex `x`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from jax_softplus import softplus
      >>> softplus(jnp.array([-20.0, 0.0, 100.0]))
      Array([2.0611537e-09, 6.9314718e-01, 1.0000000e+02], dtype=float32)
      >>> jax.grad(lambda x: softplus(x, 2.0))(jnp.float32(0.0))
      Array(0.5, dtype=float32)
      >>> softplus(jnp.float32(0.1), accuracy=jax.lax.AccuracyMode.HIGHEST)
      Array(0.7443967, dtype=float32)
    """
    if _dispatch.as_given(x):
        # At the top level: x goes into the op's jit as it is.
        if beta is _DEFAULT_BETA and accuracy is None:
            return _dispatch.DEFAULT_FORWARD(x)
        if not _validate.is_complex(x):
            dtype = _validate.forward_dtype(x)
            beta, hints = _dispatch.eager_beta(_validate.unwrap(beta), dtype, True, x)
            level = _validate.check_accuracy(accuracy, dtype)
            return _dispatch.eager_forward(x, beta, hints, level)
    x, beta = _validate.unwrap(x), _validate.unwrap(beta)
    if isinstance(x, (list, tuple)):
        x = _validate.sequence_array("x", x)  # once: its dtype picks the route
    if _validate.is_complex(x):
        return _complex(x, beta, accuracy)
    x, weak = _validate.check_forward_operand(x)
    checked, hints = _validate.check_beta(beta, x.dtype, forward=True)
    level = _validate.check_accuracy(accuracy, x.dtype)
    y = _dispatch.forward_call(x, beta, checked, hints, _traced, level)
    return _compat.weakly_typed(y) if weak else y


# softplus's default beta, the object in its signature: its identity tells a
# call that passed none.
_DEFAULT_BETA = softplus.__defaults__[0]


def _complex(x, beta, accuracy):
    """Complex x, as `jax.nn.softplus` computes it: jnp.logaddexp(beta x,
    0) / beta, differentiated by JAX (holomorphic), with that formula's
    accuracy; at beta = 1 (concrete) `jax.nn.softplus`'s own bits."""
    _validate.check_live("x", x)
    x = jnp.asarray(x)
    real = jnp.finfo(x.dtype).dtype
    checked, _ = _validate.check_beta(beta, real, forward=True)
    if _validate.check_accuracy(accuracy, real) is not None:
        raise ValueError(
            f"accuracy={accuracy!r}: complex x ({x.dtype}) has one evaluation, "
            "jax.nn.softplus's formula; there is no correctly rounded one."
        )
    if not _compat.is_tracer(checked) and float(checked) == 1.0:
        return jax.nn.softplus(x)
    # beta real, each part scaled alone: a complex beta's zero imaginary
    # part times an infinite real part of x made NaN (0 * inf), where
    # jax.nn.softplus(-inf + 0j) is 0.
    b = jnp.asarray(checked, real)

    def scaled(z, f):
        return lax.complex(f(lax.real(z), b), f(lax.imag(z), b))

    y = jnp.logaddexp(scaled(x, lax.mul), jnp.zeros((), x.dtype))
    return scaled(y, lax.div)


def _traced(x, beta, hints, accuracy):
    # Matched outside the op's rules, so that the cast's transpose sums the
    # cotangent of an operand replicated over shard_map's mesh.
    x, beta = _sharding.match_varying(x, beta)
    static = (hints, accuracy)
    if _compat.HiPrim is None:
        if _compat.in_eager_shard_map():
            return _softplus_dense(static, x, beta)
        return _softplus(static, x, beta)
    return _bind_hi(x, beta, static)


def _softplus_p_jvp(primals, tangents, *, hints, accuracy):
    """The value primitive's JVP, softplus's tangent: what the derivatives of
    its rules' values differentiate (every order above the first, which the
    rules give themselves)."""
    x, beta = primals
    y = _forward.softplus_p.bind(x, beta, hints=hints, accuracy=accuracy)
    return y, _tangent((hints, accuracy), x, beta, *tangents)


ad.primitive_jvps[_forward.softplus_p] = _softplus_p_jvp
# jet's Taylor rule takes the nested JVPs of `softplus`'s rules.
_jet.register(
    _forward.softplus_p,
    lambda x, beta, *, hints, accuracy: _traced(x, beta, hints, accuracy),
)
