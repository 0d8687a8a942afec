"""Accuracy measurement: `python -m tools.accuracy`.

Prints the max and mean error in ulps of the result's dtype, per op x dtype
x beta x input region, for jax_softplus and, in the same run, for the
anchors: the naive `diff_dst * sigmoid(beta * src)` under XLA,
`jax.vjp(jax.nn.softplus)`, and PyTorch's `softplus_backward` / `softplus`
when torch is installed. The reference is float64 NumPy, computed from the
rounded inputs; a sample of it is checked against mpmath at 50 digits.

Only inputs whose exact result is a normal number of the dtype count: XLA
on CPU flushes subnormal results to zero.

The references (`tools._references`) are also what the test
suite measures against.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass

import jax
import jax.numpy as jnp
import numpy as np

from jax_softplus import softplus, softplus_backward
from jax_softplus.testing import lowered_as
from tools import _references as references
from tools import _routes as derivatives
from tools import _search
from tools._common import (
    DTYPES,
    comma_list,
    given_options,
    machine,
    machine_line,
    naive_backward,
    output_dir,
    output_file,
    parse_beta,
    parse_dtype,
    plot_file,
    positive_int,
    print_rows,
    require,
    to_torch,
    torch_or_none,
    x64,
)
from tools._references import _f64, backward_ref, softplus_ref, ulp_error

BETAS = (1.0, 0.5, 3.0, -1.0, 0.1, 7.3, -2.5, 1.7)
# float64 also at betas the kernels rebalance (|beta| beyond 2**512).
EXTREME_BETAS_F64 = (1e200, -1e-200)


# --- inputs -------------------------------------------------------------------


@dataclass(frozen=True)
class Region:
    name: str
    t_range: tuple[float, float]  # of beta * src
    dd_range: tuple[float, float]  # of |diff_dst| (backward only)


REGIONS = {
    "core": Region("core [-87, 87]", (-87.0, 87.0), (0.5, 2.0)),
    "tail": Region("tail [-103, -87.5]", (-103.0, -87.5), (1.0, 1e6)),
    "far": Region("far [-175, -60]", (-175.0, -60.0), (1.0, 1e30)),
    # Only a diff_dst near the float32 maximum keeps the result normal here.
    "edge": Region("edge [-176, -170]", (-176.0, -170.0), (1e36, 3.4e38)),
}


def _inputs(n, beta, dtype, region, rng):
    t = rng.uniform(*region.t_range, n)
    src = (t / (beta if beta != 0 else 1.0)).astype(np.float32)
    lo, hi = region.dd_range
    dd = np.exp(rng.uniform(np.log(lo), np.log(hi), n)) * rng.choice([-1.0, 1.0], n)
    return jnp.asarray(src, dtype), jnp.asarray(dd.astype(np.float32), dtype)


# --- implementations ------------------------------------------------------------


def _backward_impls(dtype) -> dict[str, Callable]:
    def nn_vjp(src, dd, beta):
        f = lambda x: jax.nn.softplus(beta * x) / beta  # noqa: E731
        return jax.vjp(f, src)[1](dd)[0]

    impls = {
        "jax_softplus": jax.jit(softplus_backward),
        "naive XLA": jax.jit(naive_backward),
        "jax.vjp(jax.nn.softplus)": jax.jit(nn_vjp),
    }
    torch = torch_or_none()
    if torch is not None:

        def torch_bwd(src, dd, beta):
            ts, td = to_torch(torch, src), to_torch(torch, dd)
            out = torch.ops.aten.softplus_backward(td, ts, float(beta), 20.0)
            return _from_torch(out, dtype)

        impls["torch softplus_backward"] = torch_bwd
    return impls


def _forward_impls(dtype) -> dict[str, Callable]:
    def nn_softplus(x, beta):
        return jax.nn.softplus(beta * x) / beta

    impls = {
        "jax_softplus": jax.jit(softplus),
        "jax.nn.softplus": jax.jit(nn_softplus),
    }
    torch = torch_or_none()
    if torch is not None:

        def torch_fwd(x, beta):
            out = torch.nn.functional.softplus(to_torch(torch, x), float(beta), 20.0)
            return _from_torch(out, dtype)

        impls["torch softplus"] = torch_fwd
    return impls


def _from_torch(t, dtype):
    wide = t.double() if np.dtype(dtype) == np.float64 else t.float()
    return jnp.asarray(wide.numpy(), dtype)


# --- measurement ----------------------------------------------------------------


@dataclass
class Result:
    op: str
    dtype: str
    beta: float
    region: str
    impl: str
    max_ulp: float
    mean_ulp: float
    count: int
    # Where the maximum occurs ("" where the cell is a plain sample).
    worst: str = ""
    # The platform whose lowering jax_softplus was run with (the anchors
    # run as users would run them, on this CPU).
    platform: str = "cpu"


# float64: regions of t where each kernel's arithmetic differs, and
# diff_dst over float64's range where only a large one keeps the result
# normal (`_math64`).
REGIONS_F64 = {
    "backward": (
        Region("core [-40, 40]", (-40.0, 40.0), (0.5, 2.0)),
        Region("core, any diff_dst", (-40.0, 40.0), (1e-300, 1.7e308)),
        Region("tail [-745, -40]", (-745.0, -40.0), (1.0, 1e300)),
        Region("deep [-1418, -700]", (-1418.0, -700.0), (1e290, 1.79e308)),
    ),
    "forward": (
        Region("core [-40, 40]", (-40.0, 40.0), (1.0, 1.0)),
        Region("far [-745, -40]", (-745.0, -40.0), (1.0, 1.0)),
        Region("positive [40, 1e6]", (40.0, 1e6), (1.0, 1.0)),
    ),
}


def _regions_for(op, dt):
    if dt == "f64":
        return list(REGIONS_F64[op])
    if dt == "f16":
        # float16 results are normal only for |t| below about 20.
        return [Region("core [-20, 20]", (-20.0, 20.0), (0.5, 2.0))]
    if op == "backward":
        return [REGIONS["core"], REGIONS["tail"], REGIONS["edge"]]
    return [REGIONS["core"], REGIONS["far"]]


def _inputs_f64(n, op, beta, region, rng):
    """src and diff_dst for a float64 cell: t concentrated near the switch
    points (`_search`), diff_dst log-uniform over the region's range with
    a tenth of it at powers of two, where the kernel's normalization of
    diff_dst changes binade."""
    t = _search.concentrated(n, *region.t_range, _search.SWITCHES_F64[op], rng)
    with np.errstate(over="ignore"):
        src = t / np.float64(beta)
    src = np.where(np.isfinite(src), src, np.sign(src) * np.finfo(np.float64).max)
    lo, hi = np.log2(region.dd_range[0]), np.log2(region.dd_range[1])
    e = rng.uniform(lo, hi, n)
    e = np.where(rng.random(n) < 0.1, np.floor(e), e)
    dd = np.exp2(e) * rng.choice([-1.0, 1.0], n)
    return src, dd


def _measure_f64(n, op, beta, region, impls, rng, cache, key, refine=True):
    """The float64 cell: each implementation against mpmath on the
    concentrated sample; for jax_softplus also the local search from the
    worst points (`_search.refine`), whose maximum is the cell's. The
    sample and its reference are kept in `cache` under `key` for the other
    platforms' passes."""
    dtype = np.float64

    def exact(s, d):
        return references.exact_values(op, s, beta, d if op == "backward" else None)

    def call(f, s, d):
        args = (s, d, beta) if op == "backward" else (s, beta)
        return np.asarray(f(*(jnp.asarray(a) for a in args[:-1]), beta))

    if key not in cache:
        src, dd = _inputs_f64(n, op, beta, region, rng)
        cache[key] = (src, dd, exact(src, dd))
    src, dd, ref = cache[key]
    out = []
    for name, f in impls.items():
        err = references.derivative_error(
            call(f, src, dd), ref, np.abs(ref.real), dtype
        )
        if not err.size:
            continue
        worst = ""
        top = float(np.max(err))
        if refine and name.startswith(OURS):

            def errors(inputs, f=f):
                s, d = inputs["src"], inputs["dd"]
                r = exact(s, d)
                e = np.full(s.size, np.nan)
                normal = references.normal_exact(r, dtype)
                e[normal] = references.derivative_error(
                    call(f, s, d), r, np.abs(r.real), dtype
                )
                return e

            found, at = _search.refine(errors, {"src": src, "dd": dd}, dtype)
            if found > top:
                top = found
            k = int(np.argmax(err))
            at = at if found >= float(np.max(err)) else {"src": src[k], "dd": dd[k]}
            worst = f"src={float(at['src'])!r}" + (
                f", diff_dst={float(at['dd'])!r}" if op == "backward" else ""
            )
        out.append((name, top, float(np.mean(err)), int(err.size), worst))
    return out


OURS = "jax_softplus"
# The platforms whose evaluation the tool runs here (`jax_softplus.testing`):
# ROCm's lowering is CUDA's.
PLATFORMS = ("cpu", "cuda", "tpu")
_PLATFORM_NAMES = {"cpu": "CPU", "cuda": "CUDA/ROCm", "tpu": "TPU"}


def ours(platform):
    """jax_softplus's column for a platform's evaluation."""
    if platform == "cpu":
        return OURS
    if platform.startswith("native:"):
        return f"{OURS}, on the {platform.partition(':')[2].upper()}"
    return f"{OURS}, {_PLATFORM_NAMES[platform]} lowering"


def _platform_name(platform):
    if platform.startswith("native:"):
        return f"{platform.partition(':')[2].upper()} (native)"
    return _PLATFORM_NAMES[platform]


def native_platforms():
    """Where the default backend is not a CPU (the tool run on a GPU or a
    TPU), jax_softplus runs there, lowered as that platform lowers it:
    ("native:<backend>",); else None."""
    backend = jax.default_backend()
    return None if backend == "cpu" else (f"native:{backend}",)


def _columns(impls):
    """The implementations in a table's order: jax_softplus's columns
    first, then the anchors, each as first met."""
    seen = list(dict.fromkeys(impls))
    return [i for i in seen if i.startswith(OURS)] + [
        i for i in seen if not i.startswith(OURS)
    ]


HIGHEST = jax.lax.AccuracyMode.HIGHEST


def _with_anchors(platform):
    """Whether the anchors run beside jax_softplus in a platform's pass (once:
    on this CPU, or natively on the default backend)."""
    return platform == "cpu" or platform.startswith("native:")


def _lowering(platform):
    """The context in which jax_softplus runs with `platform`'s lowering."""
    if platform.startswith("native:"):
        return contextlib.nullcontext()
    return lowered_as(platform)


def _cell_rng(seed, *key):
    """A generator for one cell, the same for every platform's pass: the
    same inputs, so that one reference serves them all."""
    return np.random.default_rng([seed, zlib.crc32(repr(key).encode())])


def measure(
    n=200_000,
    dtypes=("f32", "bf16", "f16"),
    betas=None,
    seed=0,
    log=None,
    n64=100_000,
    platforms=("cpu",),
):
    """The value cells: per dtype, beta and region, each implementation's
    max and mean error in ulps. `n` points per float32/bfloat16/float16
    cell (a uniform sample against float64 NumPy), `n64` per float64 cell
    (against mpmath, concentrated near the switch points, with the local
    search). `betas` None: `BETAS`, and for float64 `EXTREME_BETAS_F64` too.
    jax_softplus runs with each platform's lowering in `platforms`, on the
    same inputs (a platform "native:<backend>" is the default backend's own,
    on a machine whose default backend is not the CPU); the anchors with the
    first platform's.
    """
    results = []
    cache: dict = {}
    for dt in dtypes:
        chosen = betas
        if chosen is None:
            chosen = BETAS + (EXTREME_BETAS_F64 if dt == "f64" else ())
        count = n64 if dt == "f64" else n
        with x64(dt == "f64"):
            for platform in platforms:
                with _lowering(platform):
                    results += _measure_dtype(
                        count, dt, chosen, seed, log, platform, cache
                    )
    return results


def value_cells(dtypes, betas):
    """How many value cells `measure` runs per platform (for progress)."""
    total = 0
    for dt in dtypes:
        chosen = betas or BETAS + (EXTREME_BETAS_F64 if dt == "f64" else ())
        total += len(chosen) * sum(len(_regions_for(op, dt)) for op in _OPS)
    return total


_OPS = ("backward", "forward")


def _measure_dtype(n, dt, betas, seed, log, platform, cache):
    dtype = DTYPES[dt]
    if _with_anchors(platform):
        impls = {
            op: {ours(platform) if k == OURS else k: f for k, f in fs.items()}
            for op, fs in (
                ("backward", _backward_impls(dtype)),
                ("forward", _forward_impls(dtype)),
            )
        }
    else:
        name = ours(platform)
        impls = {
            "backward": {name: jax.jit(softplus_backward)},
            "forward": {name: jax.jit(softplus)},
        }
    if dt != "f64" and platform != "tpu":  # TPUs have no HIGHEST (no float64)
        name = f"{ours(platform)}, HIGHEST"
        impls["backward"][name] = jax.jit(
            lambda s, d, b: softplus_backward(s, d, b, accuracy=HIGHEST)
        )
        impls["forward"][name] = jax.jit(lambda x, b: softplus(x, b, accuracy=HIGHEST))
    results = []
    for beta in betas:
        for op in _OPS:
            for region in _regions_for(op, dt):
                if log:
                    log(
                        f"values {platform} {op} {dt} beta={beta} {region.name}",
                        kind=("values", "f64" if dt == "f64" else "f32"),
                    )
                rng = _cell_rng(seed, dt, beta, op, region.name)
                key = (dt, beta, op, region.name)
                if dt == "f64":
                    rows = _measure_f64(n, op, beta, region, impls[op], rng, cache, key)
                else:
                    rows = _measure_sample(n, op, beta, dtype, region, impls[op], rng)
                results += [
                    Result(op, dt, beta, region.name, *row, platform=platform)
                    for row in rows
                ]
    return results


def _measure_sample(n, op, beta, dtype, region, impls, rng):
    """A float32 / bfloat16 / float16 cell: a uniform sample against the
    float64 reference (the exhaustive run covers every float32 src)."""
    src, dd = _inputs(n, beta, dtype, region, rng)
    if op == "backward":
        ref, args = backward_ref(src, dd, beta), (src, dd, beta)
    else:
        ref, args = softplus_ref(src, beta), (src, beta)
    out = []
    for name, f in impls.items():
        err = ulp_error(f(*args), ref, dtype)
        if err.size:
            out.append(
                (name, float(np.nanmax(err)), float(np.nanmean(err)), int(err.size), "")
            )
    return out


def mpmath_spot_check(n=200, seed=1):
    """Check the float64 reference and jax_softplus (f32) against mpmath.

    Returns the max error, in float32 ulps, of each against 50-digit values,
    over `n` points per op spread across the core and tail regions.
    """
    import mpmath

    mpmath.mp.dps = 50
    rng = np.random.default_rng(seed)
    worst = {"backward: float64 reference": 0.0, "backward: jax_softplus": 0.0}
    worst |= {"forward: float64 reference": 0.0, "forward: jax_softplus": 0.0}
    for beta in (1.0, 1.7, -2.5):
        for region in (REGIONS["core"], REGIONS["tail"]):
            src, dd = _inputs(n, beta, jnp.float32, region, rng)
            s, d = np.asarray(src, np.float64), np.asarray(dd, np.float64)
            b = mpmath.mpf(float(np.float32(beta)))
            exact_b = np.array(
                [
                    float(mpmath.mpf(di) / (1 + mpmath.exp(-b * si)))
                    for si, di in zip(s, d, strict=True)
                ]
            )
            exact_f = np.array(
                [float(mpmath.log1p(mpmath.exp(b * si)) / b) for si in s]
            )
            pairs = {
                "backward: float64 reference": (backward_ref(src, dd, beta), exact_b),
                "backward: jax_softplus": (softplus_backward(src, dd, beta), exact_b),
                "forward: float64 reference": (softplus_ref(src, beta), exact_f),
                "forward: jax_softplus": (softplus(src, beta), exact_f),
            }
            for key, (got, exact) in pairs.items():
                err = ulp_error(got, exact, jnp.float32)
                if err.size:
                    worst[key] = max(worst[key], float(err.max()))
    return worst


# --- derivatives -------------------------------------------------------------

# (label, function, (p, q, r), route, |diff_dst| range as log10): the
# derivatives users take, by the route they take them; the second derivative
# in beta by reverse over reverse and by jax.hessian.
_DD = (-20.0, float(np.log10(3e38)))
_HUGE_DD = (30.0, float(np.log10(3e38)))
DERIVATIVES = (
    ("d softplus/dx", "softplus", (1, 0, 0), "grad", _DD),
    ("d softplus/dbeta", "softplus", (0, 1, 0), "grad", _DD),
    ("d bwd/dsrc", "backward", (1, 0, 0), "grad", _DD),
    ("d bwd/dbeta", "backward", (0, 1, 0), "grad", _DD),
    ("d bwd/dbeta, diff_dst >= 1e30", "backward", (0, 1, 0), "grad", _HUGE_DD),
    ("d bwd/d diff_dst", "backward", (0, 0, 1), "grad", _DD),
    ("d2 softplus/dx2", "softplus", (2, 0, 0), "grad", _DD),
    ("d2 softplus/dx dbeta", "softplus", (1, 1, 0), "grad", _DD),
    ("d2 softplus/dbeta2", "softplus", (0, 2, 0), "grad", _DD),
    ("d2 softplus/dbeta2, hessian", "softplus", (0, 2, 0), "hessian", _DD),
    ("d2 bwd/dsrc2", "backward", (2, 0, 0), "grad", _DD),
    ("d2 bwd/dsrc dbeta", "backward", (1, 1, 0), "grad", _DD),
    ("d2 bwd/dbeta2", "backward", (0, 2, 0), "grad", _DD),
    ("d2 bwd/dbeta2, hessian", "backward", (0, 2, 0), "hessian", _DD),
    ("d3 softplus/dx3", "softplus", (3, 0, 0), "grad", _DD),
    ("d3 softplus/dbeta3", "softplus", (0, 3, 0), "grad", _DD),
    ("d4 softplus/dbeta4", "softplus", (0, 4, 0), "grad", _DD),
    ("d3 bwd/dbeta3", "backward", (0, 3, 0), "grad", _DD),
)


def _beta_ranges(dtype):
    """{label: (log10 lo, log10 hi)} of |beta|, both signs taken: from the
    dtype's smallest normal to its largest, the middle in decades."""
    info = jnp.finfo(dtype)
    tiny, top = float(info.tiny), float(info.max)
    return {
        f"{tiny:.2g}..1e-5": (float(np.log10(tiny)), -5.0),
        "1e-5..0.1": (-5.0, -1.0),
        "0.1..10": (-1.0, 1.0),
        "10..1e5": (1.0, 5.0),
        f"1e5..{top:.2g}": (5.0, float(np.log10(top))),
    }


# The derivative cells' ranges of |beta|, per dtype: the whole normal range.
BETA_RANGES = {"f32": _beta_ranges(np.float32), "f64": _beta_ranges(np.float64)}
# |t| up to where a derivative can still be normal: a float32 diff_dst of
# 3e38 times src**2 of 1e76 keeps s''(t) ~ e^-|t| normal to |t| = 350, and
# the fourth order further (float64: 2,900).
_SPAN = {np.dtype(np.float32): 400.0, np.dtype(np.float64): 3000.0}


# What users would write instead, differentiated by JAX.
_NAIVE = (
    ("softplus", lambda x, b, d: jax.nn.softplus(b * x) / b),
    ("backward", lambda s, b, d: d * jax.nn.sigmoid(b * s)),
)


def _torch_derivative(torch, fun, pqr, x, b, dd, dtype):
    """PyTorch's derivative by autograd (double backward and beyond): its
    softplus takes beta as a number, so x / src derivatives only."""
    p, q, r = pqr
    if q or r:
        return None
    tdt = {np.float32: torch.float32, np.float64: torch.float64}[dtype]
    xs = torch.tensor(np.asarray(x), dtype=tdt, requires_grad=True)
    y = torch.nn.functional.softplus(xs, beta=float(b))
    order = p + (1 if fun == "backward" else 0)  # backward = dd * d/dx
    for _ in range(order):
        if not y.requires_grad:  # every element past its linear threshold
            return np.zeros(len(x)) * np.asarray(dd, np.float64)
        (y,) = torch.autograd.grad(y.sum(), xs, create_graph=True)
    out = y.detach().numpy().astype(np.float64)
    return out * np.asarray(dd, np.float64) if fun == "backward" else out


@dataclass
class DerivativeResult:
    quantity: str
    dtype: str
    betas: str
    impl: str
    max_error: float  # ulps for orders 1 and 2, relative for 3 and 4
    unit: str
    count: int
    worst: str = ""  # where jax_softplus's maximum occurs
    platform: str = "cpu"  # the lowering jax_softplus ran with


def _derivative_inputs(n, log_range, dtype, dd_range, rng):
    """(x, beta, dd) per beta: 4 betas log-uniform over the range, either
    sign; t = beta x half within [-30, 30], half out to where a derivative
    can be normal (`_SPAN`), each with a share near the derivative
    families' switch points (`_search.SWITCHES_DERIVATIVES`, both signs).
    x and diff_dst are normal numbers (or x = 0): the CPU reads a
    subnormal operand as 0."""
    dtype = np.dtype(dtype)
    span = _SPAN[dtype]
    tiny = jnp.finfo(dtype).tiny
    points = [p for q in _search.SWITCHES_DERIVATIVES for p in (q, -q)]
    for _ in range(4):
        b = dtype.type(10.0 ** rng.uniform(*log_range) * rng.choice([-1.0, 1.0]))
        m = max(n // 4, 2)
        t = np.concatenate(
            [
                _search.concentrated(m // 2, -30.0, 30.0, points, rng),
                _search.concentrated(m - m // 2, -span, span, points, rng),
            ]
        )
        dd = 10.0 ** rng.uniform(*dd_range, m) * rng.choice([-1.0, 1.0], m)
        with np.errstate(over="ignore", under="ignore"):
            x = (t / np.float64(b)).astype(dtype)
            dd = dd.astype(dtype)
        keep = np.isfinite(x) & ((np.abs(x) >= tiny) | (x == 0))
        keep &= np.isfinite(dd) & (np.abs(dd) >= tiny)
        yield x[keep], b, dd[keep]


def measure_derivatives(
    n=10_000,
    n64=10_000,
    dtypes=("f32", "f64"),
    betas=None,
    seed=0,
    quantities=None,
    log=None,
    platforms=("cpu",),
):
    """Per-element error of the derivatives in `DERIVATIVES` (or the labels
    in `quantities`), per dtype and range of |beta| (`BETA_RANGES`, or the
    labels in `betas`), against mpmath at 60 digits
    (`references.exact_derivatives`), for jax_softplus with each platform's
    lowering in `platforms`, and, on the CPU, for the naive formula
    differentiated by JAX and, where installed, PyTorch's autograd.

    Orders 1 and 2 in ulps of the exact value (of the sum of its terms'
    magnitudes where the derivative has a zero of its own), orders 3 and 4
    as a relative error; only elements whose exact value is normal count.
    `n` and `n64` points per cell (float32, float64), the same for every
    platform; jax_softplus's maximum is that of a local search from the
    cell's worst points too.
    """
    rows = [d for d in DERIVATIVES if quantities is None or d[0] in quantities]
    torch = torch_or_none()
    results = []
    cache: dict = {}
    for dt in dtypes:
        dtype = {"f32": np.float32, "f64": np.float64}[dt]
        ranges = {
            label: r
            for label, r in BETA_RANGES[dt].items()
            if betas is None or label in betas
        }
        with x64(dt == "f64"):
            for platform in platforms:
                with _lowering(platform):
                    for label, log_range in ranges.items():
                        for dd_range in dict.fromkeys(d[4] for d in rows):
                            group = [d for d in rows if d[4] == dd_range]
                            if log:
                                big = dd_range == _HUGE_DD
                                log(
                                    f"derivatives {platform} {dt} |beta| {label}"
                                    + (" (diff_dst >= 1e30)" if big else ""),
                                    kind=("derivatives", dt),
                                )
                            key = (dt, label, dd_range)
                            results += _measure_group(
                                group,
                                dtype,
                                dt,
                                label,
                                log_range,
                                dd_range,
                                n if dt == "f32" else n64,
                                torch if _with_anchors(platform) else None,
                                _cell_rng(seed, *key),
                                platform,
                                cache.setdefault(key, {}),
                            )
    return results


def derivative_cells(dtypes, quantities=None, betas=None):
    """How many derivative cells `measure_derivatives` runs per platform."""
    rows = [d for d in DERIVATIVES if quantities is None or d[0] in quantities]
    groups = len(dict.fromkeys(d[4] for d in rows))
    total = 0
    for dt in dtypes:
        labels = [b for b in BETA_RANGES[dt] if betas is None or b in betas]
        total += len(labels) * groups
    return total


def _measure_group(
    group, dtype, dt, label, log_range, dd_range, n, torch, rng, platform, cache
):
    """One cell: the group's quantities at 4 betas of the range; the inputs
    and their mpmath values are kept in `cache` for the other platforms."""
    errs: dict = {}
    worst: dict = {}  # (q, route) -> (error, x, beta, dd, errors) of ours
    specs = tuple((d[0], d[1], d[2]) for d in group)
    name = ours(platform)
    if "inputs" not in cache:
        cache["inputs"] = [
            (
                x,
                b,
                dd,
                references.exact_derivatives(
                    {q: (f, pqr) for q, f, pqr in specs}, x, b, dd
                ),
            )
            for x, b, dd in _derivative_inputs(n, log_range, dtype, dd_range, rng)
        ]
    for x, b, dd, refs in cache["inputs"]:
        args = (jnp.asarray(x), jnp.asarray(b), jnp.asarray(dd))
        for route in dict.fromkeys(d[3] for d in group):
            names = tuple(s for s, d in zip(specs, group, strict=True) if d[3] == route)
            impls = {name: derivatives.compiled(route, names)}
            if _with_anchors(platform):
                impls["naive formula"] = derivatives.compiled(route, names, _NAIVE)
            for impl, fn in impls.items():
                got = fn(*args)
                for q, _, pqr in names:
                    e = references.derivative_error(
                        got[q], *refs[q], dtype, sum(pqr) > 2
                    )
                    errs.setdefault((q, impl), []).append(e)
                    if impl == name and e.size:
                        normal = references.normal_exact(refs[q][0], dtype)
                        full = np.full(x.size, np.nan)
                        full[normal] = e
                        top = worst.get((q, route))
                        if top is None or e.max() > top[0]:
                            worst[(q, route)] = (e.max(), x, b, dd, full)
            if torch is not None:
                for q, f, pqr in names:
                    got = _torch_derivative(torch, f, pqr, x, b, dd, dtype)
                    if got is not None:
                        e = references.derivative_error(
                            got, *refs[q], dtype, sum(pqr) > 2
                        )
                        errs.setdefault((q, "PyTorch autograd"), []).append(e)
    found = {}
    for (q, route), (_, x, b, dd, full) in worst.items():
        spec = next(s for s in specs if s[0] == q)
        found[q] = _refine_derivative(spec, route, dtype, x, b, dd, full)
    out = []
    for (q, impl), parts in errs.items():
        err = np.concatenate(parts)
        order = sum(next(d[2] for d in group if d[0] == q))
        top = float(err.max()) if err.size else float("nan")
        where = ""
        if impl == name and q in found:
            top = max(top, found[q][0])
            where = found[q][1]
        out.append(
            DerivativeResult(
                q,
                dt,
                label,
                impl,
                top,
                "ulp" if order <= 2 else "relative",
                int(err.size),
                where,
                platform,
            )
        )
    return out


def _refine_derivative(spec, route, dtype, x, b, dd, full, keep=8):
    """The local search (`_search.refine`) from a cell's worst points for
    one quantity of jax_softplus: (max error, where)."""
    q, fun, pqr = spec
    fn = derivatives.compiled(route, (spec,))
    relative = sum(pqr) > 2

    def errors(inputs):
        xs, ds = inputs["x"], inputs["dd"]
        beta = inputs["beta"]
        refs = references.exact_derivatives({q: (fun, pqr)}, xs, beta, ds)
        got = fn(jnp.asarray(xs), jnp.asarray(beta), jnp.asarray(ds))[q]
        ref = refs[q]
        e = np.full(xs.size, np.nan)
        normal = references.normal_exact(ref[0], dtype)
        e[normal] = references.derivative_error(got, *ref, dtype, relative)
        return e

    order = np.argsort(np.nan_to_num(full, nan=-1.0))[-keep:]
    start = {"x": x[order], "dd": dd[order], "beta": np.asarray(b, dtype)}
    err, at = _search.refine(errors, start, dtype, rounds=3, keep=keep)
    where = f"x={float(at['x'])!r}, beta={float(b)!r}, diff_dst={float(at['dd'])!r}"
    return err, where


def _fmt_error(v, unit):
    if v is None:
        return ""
    if not np.isfinite(v):
        return "NaN/inf"
    if unit == "relative":
        return f"{v:.1e}" if v < 1 else "> 1"
    return f"{v:.3g}" if v < 1e6 else "> 1e6"


def derivatives_markdown(results, by_range=False) -> str:
    """One table per dtype, a column per implementation: a row per quantity
    (the max over every range of |beta|), or per quantity and range."""
    order = {d[0]: k for k, d in enumerate(DERIVATIVES)}
    out = []
    for dt in dict.fromkeys(r.dtype for r in results):
        rows = [r for r in results if r.dtype == dt]
        impls = _columns(r.impl for r in rows)
        cells: dict = {}
        for r in sorted(rows, key=lambda r: order.get(r.quantity, len(order))):
            key = (r.quantity, r.betas if by_range else None, r.unit)
            row = cells.setdefault(key, {})
            row[r.impl] = max(row.get(r.impl, 0.0), r.max_error)
        out.append(
            f"**{dt}**: max error, in ulps (orders 1 and 2) or relative (3 and "
            "4); '> 1e6' ulps or '> 1' relative: no correct digit\n"
        )
        head = "| quantity | " + ("\\|beta\\| | " if by_range else "")
        out.append(head + " | ".join(impls) + " |")
        out.append("|---|" + ("---|" if by_range else "") + "---:|" * len(impls))
        for (q, label, unit), row in cells.items():
            txt = [_fmt_error(row.get(i), unit) for i in impls]
            first = f"| {q} | " + (f"{label} | " if by_range else "")
            out.append(first + " | ".join(txt) + " |")
        out.append("")
    return "\n".join(out)


_DERIVATIVE_COLUMNS = [
    ("quantity", lambda r: r.quantity, False),
    ("dtype", lambda r: r.dtype, False),
    ("|beta|", lambda r: r.betas, False),
    ("implementation", lambda r: r.impl, False),
    ("max error", lambda r: _fmt_error(r.max_error, r.unit), True),
    ("unit", lambda r: r.unit, False),
    ("n", lambda r: str(r.count), True),
]


_COLUMNS = [
    ("op", lambda r: r.op, False),
    ("dtype", lambda r: r.dtype, False),
    ("beta", lambda r: f"{r.beta:.2g}", True),
    ("region", lambda r: r.region, False),
    ("implementation", lambda r: r.impl, False),
    ("max ulp", lambda r: f"{r.max_ulp:.2f}", True),
    ("mean ulp", lambda r: f"{r.mean_ulp:.3f}", True),
]


def print_table(results, file=None):
    print_rows(results, _COLUMNS, file)


def markdown_summary(results) -> str:
    """Max ulp per dtype x beta x region, one table per op, one column per
    implementation (the tables in docs/accuracy.md)."""
    out = []
    for op in ("backward", "forward"):
        rows = [r for r in results if r.op == op]
        impls = _columns(r.impl for r in rows)
        cells: dict = {}
        for r in rows:
            cells.setdefault((r.dtype, r.beta, r.region), {})[r.impl] = r.max_ulp
        out.append(f"**{op}**, max error in ulps\n")
        out.append("| dtype | beta | region | " + " | ".join(impls) + " |")
        out.append("|---|---:|---|" + "---:|" * len(impls))
        for (dt, beta, region), row in cells.items():
            vals = [row.get(i) for i in impls]
            txt = [
                "" if v is None else f"{v:.3g}" if v < 1e4 else f"{v:.1e}" for v in vals
            ]
            out.append(f"| {dt} | {beta:g} | {region} | " + " | ".join(txt) + " |")
        out.append("")
    return "\n".join(out)


def values_summary_markdown(results) -> str:
    """Max ulp per op x dtype over every beta and region, one column per
    implementation."""
    impls = _columns(r.impl for r in results)
    cells: dict = {}
    for r in results:
        row = cells.setdefault((r.op, r.dtype), {})
        row[r.impl] = max(row.get(r.impl, 0.0), r.max_ulp)
    out = ["| op | dtype | " + " | ".join(impls) + " |"]
    out.append("|---|---|" + "---:|" * len(impls))
    for (op, dt), row in cells.items():
        txt = [_fmt_error(row.get(i), "ulp") for i in impls]
        out.append(f"| {op} | {dt} | " + " | ".join(txt) + " |")
    return "\n".join(out) + "\n"


def _worst_markdown(results):
    rows = [r for r in results if r.impl.startswith(OURS) and r.worst]
    out = [
        "| op | platform | beta | region | max ulp | at |",
        "|---|---|---:|---|---:|---|",
    ]
    for r in rows:
        out.append(
            f"| {r.op} | {_platform_name(r.platform)} | {r.beta:g} | {r.region} "
            f"| {r.max_ulp:.3f} | {r.worst} |"
        )
    return "\n".join(out) + "\n"


def _worst_derivatives(rows):
    out = [
        "| quantity | dtype | platform | \\|beta\\| | max error | at |",
        "|---|---|---|---|---:|---|",
    ]
    for r in rows:
        if r.impl.startswith(OURS) and r.worst:
            err = _fmt_error(r.max_error, r.unit)
            out.append(
                f"| {r.quantity} | {r.dtype} | {_platform_name(r.platform)} "
                f"| {r.betas} | {err} | {r.worst} |"
            )
    return "\n".join(out) + "\n"


def _details(summary, body):
    return f"<details markdown>\n<summary>{summary}</summary>\n\n{body}\n</details>\n"


def write_tables(directory, results, derivative_rows, spot, n):
    """The tables the docs include and the README's bounds are tested
    against: accuracy.md, derivatives.md and accuracy.json in `directory`.
    `n` is (points per float32/16 value cell, per float64 value cell, per
    derivative cell)."""
    import os

    os.makedirs(directory, exist_ok=True)
    m = machine()
    torch = torch_or_none()
    where = (
        f"Measured on {machine_line(m)}, "
        f"{'torch ' + torch.__version__ if torch else 'PyTorch not installed'}; "
        f"written by `python -m tools.accuracy --tables {directory}`."
    )
    n32, n64, nd = n
    if results:
        with open(os.path.join(directory, "accuracy.md"), "w") as f:
            f.write(
                f"{where} {n32:,} inputs per float32/bfloat16/float16 cell (uniform "
                f"in each region, against float64 NumPy); {n64:,} per float64 cell, "
                "against mpmath, a share of them near every switch point of the "
                "kernels, and jax_softplus's maximum also over a local search "
                "from the worst inputs found.\n\n"
            )
            f.write("Max error in ulps over every beta and region:\n\n")
            f.write(values_summary_markdown(results) + "\n")
            f.write(_details("Every beta and region", markdown_summary(results)))
            f.write(_details("Where the float64 maxima are", _worst_markdown(results)))
    if derivative_rows:
        with open(os.path.join(directory, "derivatives.md"), "w") as f:
            f.write(
                f"{where} {nd:,} inputs per cell and dtype (t = beta x half "
                "within [-30, 30], half over the normal range, a share near "
                "every switch point of the derivative families), and "
                "jax_softplus's maximum also over a local search from the worst "
                "inputs found.\n\n"
            )
            f.write(derivatives_markdown(derivative_rows) + "\n")
            body = derivatives_markdown(derivative_rows, by_range=True)
            f.write(_details("Per range of |beta|", body))
            f.write(
                _details("Where the maxima are", _worst_derivatives(derivative_rows))
            )
    with open(os.path.join(directory, "accuracy.json"), "w") as f:
        json.dump(
            {
                "machine": m,
                "results": [asdict(r) for r in results],
                "derivatives": [asdict(r) for r in derivative_rows],
                "mpmath": spot,
            },
            f,
            indent=1,
        )


def plot(path, beta=1.7, n=400_000, bins=200, seed=0):
    """Max ulp error per bin of beta * src, f32 backward, us and the anchors."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(seed)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    panels = (
        ("backward", Region("", (-103.0, 87.0), (1.0, 1e6))),
        ("forward", Region("", (-100.0, 87.0), (1.0, 1.0))),
    )
    for ax, (op, region) in zip(axes, panels, strict=True):
        src, dd = _inputs(n, beta, jnp.float32, region, rng)
        t = np.float64(np.float32(beta)) * np.asarray(src, np.float64)
        if op == "backward":
            ref, impls = backward_ref(src, dd, beta), _backward_impls(jnp.float32)
            args = (src, dd, beta)
        else:
            ref, impls = softplus_ref(src, beta), _forward_impls(jnp.float32)
            args = (src, beta)
        edges = np.linspace(*region.t_range, bins + 1)
        for name, f in impls.items():
            got = _f64(f(*args))
            info = jnp.finfo(jnp.float32)
            ok = np.isfinite(ref) & (np.abs(ref) >= float(info.tiny))
            ulp = np.ldexp(1.0, np.frexp(np.where(ok, ref, 1.0))[1] - 1 - info.nmant)
            err = np.where(ok, np.abs(got - ref) / ulp, np.nan)
            idx = np.clip(np.digitize(t, edges) - 1, 0, bins - 1)
            worst = np.full(bins, np.nan)
            for i in range(bins):
                sel = err[idx == i]
                sel = sel[np.isfinite(sel)]
                if sel.size:
                    worst[i] = sel.max()
            centers = 0.5 * (edges[1:] + edges[:-1])
            ax.semilogy(centers, np.maximum(worst, 1e-2), label=name, lw=1.2)
        ax.axhline(2.5, color="k", ls=":", lw=0.8)
        ax.set_xlabel("beta * src")
        ax.set_title(f"{op}, float32, beta = {beta}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("max error per bin (ulp); dotted: 2.5")
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=110)


def _clear_line():
    if sys.stderr.isatty():
        print("\r" + " " * 78 + "\r", end="", file=sys.stderr)


class Progress:
    """One line per step (redrawn on a terminal): the time spent, the time
    left, and the step. Steps are of kinds that take very different times
    (a float32 value cell, a float64 one against mpmath, a derivative
    cell): the time left sums each kind's remaining steps at that kind's
    pace so far, or, before a kind has run, at a prior multiple of the
    cheapest kind's pace."""

    PRIOR = {("values", "f64"): 15.0, ("derivatives", "f32"): 40.0}
    PRIOR[("derivatives", "f64")] = 60.0

    def __init__(self, totals):
        self.totals = {k: v for k, v in totals.items() if v}
        self.total = max(sum(self.totals.values()), 1)
        self.done = 0
        self.spent: dict = {}  # kind -> [steps done, seconds]
        self.started = self.last = time.perf_counter()
        self.kind = None

    def _left(self):
        paces = {k: t / n for k, (n, t) in self.spent.items() if n}
        if not paces:
            return None
        unit = min(p / self.PRIOR.get(k, 1.0) for k, p in paces.items())
        left = 0.0
        for kind, total in self.totals.items():
            n = self.spent.get(kind, (0, 0.0))[0]
            pace = paces.get(kind, unit * self.PRIOR.get(kind, 1.0))
            left += max(total - n, 0) * pace
        return left

    def __call__(self, msg, kind=None):
        now = time.perf_counter()
        if self.kind is not None:
            n, t = self.spent.get(self.kind, (0, 0.0))
            self.spent[self.kind] = (n + 1, t + now - self.last)
        self.kind, self.last = kind, now
        self.done += 1
        left = self._left()
        eta = f"~{left / 60:4.1f} min left" if left is not None else "...           "
        spent = (now - self.started) / 60
        msg = f"[{spent:5.1f} min, {eta}] {self.done}/{self.total} {msg}"
        if sys.stderr.isatty():
            print(f"\r{msg[:78]:78}", end="", file=sys.stderr, flush=True)
        else:
            print(msg, file=sys.stderr, flush=True)


# A first look in under two minutes: fewer points, the CPU only.
QUICK = {"n": 20_000, "n64": 2_000, "nd": 500, "platforms": "cpu"}


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m tools.accuracy",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog="The docs' tables (--tables docs/tables --plot "
        "docs/img/accuracy.png, every platform) took 22.8 minutes on 2 "
        "cores, --quick 1.8 (docs/tables/timings.md).",
    )
    p.add_argument(
        "-n",
        type=positive_int,
        default=200_000,
        help="samples per float32/16 value cell",
    )
    p.add_argument(
        "--n64",
        type=positive_int,
        default=100_000,
        help="samples per float64 value cell (against mpmath, with the search)",
    )
    p.add_argument(
        "--nd",
        type=positive_int,
        default=4_000,
        help="samples per derivative cell, each dtype (with the search)",
    )
    p.add_argument("--dtypes", default="f32,bf16,f16,f64", help="f32, bf16, f16, f64")
    p.add_argument(
        "--betas",
        default=argparse.SUPPRESS,
        help="comma list of the value cells' betas; by default "
        f"{', '.join(f'{b:g}' for b in BETAS)}, and for float64 also "
        f"{', '.join(f'{b:g}' for b in EXTREME_BETAS_F64)}",
    )
    p.add_argument(
        "--platforms",
        default=",".join(PLATFORMS),
        help="comma list of the platforms whose lowering jax_softplus runs "
        "with, on this CPU (jax_softplus.testing.lowered_as): " + ", ".join(PLATFORMS),
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a first look: "
        + ", ".join(
            f"--{k} {v}" if len(k) > 1 else f"-{k} {v}" for k, v in QUICK.items()
        )
        + " (explicit options win)",
    )
    p.add_argument("--no-mpmath", action="store_true", help="skip the mpmath check")
    p.add_argument(
        "--plot", type=plot_file, metavar="PNG", help="write the ulp-vs-t plot"
    )
    p.add_argument(
        "--json", type=output_file, metavar="PATH", help="write the figures as JSON"
    )
    p.add_argument(
        "--markdown", type=output_file, metavar="PATH", help="write the summary table"
    )
    p.add_argument(
        "--tables",
        type=output_dir,
        metavar="DIR",
        help="write the docs' tables (accuracy.md, derivatives.md, accuracy.json)",
    )
    p.add_argument(
        "--no-derivatives",
        action="store_true",
        help="skip the table of derivatives (orders 1 to 4, every argument)",
    )
    argv = sys.argv[1:] if argv is None else list(argv)
    args = p.parse_args(argv)
    if args.quick:
        given = given_options(p, argv, QUICK)
        for k, v in QUICK.items():
            if k not in given:
                setattr(args, k, type(getattr(args, k))(v))
    dtypes = comma_list(p, "--dtypes", args.dtypes, parse_dtype)
    given = getattr(args, "betas", None)
    betas = None if given is None else comma_list(p, "--betas", given, parse_beta)
    platforms = comma_list(p, "--platforms", args.platforms, str, PLATFORMS)
    native = native_platforms()
    if native:
        print(
            f"the default backend is {jax.default_backend()}: jax_softplus runs "
            "there, as that platform lowers it (--platforms is for a CPU)",
            file=sys.stderr,
        )
        platforms = list(native)
    if args.plot:
        require("matplotlib", "--plot", p)
    # What needs mpmath runs where it is installed; elsewhere the rest runs
    # and one line says what was skipped.
    skipped = []
    if importlib.util.find_spec("mpmath") is None:
        skipped = [
            name
            for name, off in (
                ("the mpmath check", args.no_mpmath),
                ("the derivatives table", args.no_derivatives),
                ("the float64 values", "f64" not in dtypes),
            )
            if not off
        ]
        args.no_mpmath = args.no_derivatives = True
        dtypes = [d for d in dtypes if d != "f64"]
    skip_note = (
        f"skipped {' and '.join(skipped)}: they need mpmath, which is not "
        'installed (pip install -e ".[bench]" from a checkout)'
        if skipped
        else ""
    )
    if skip_note:
        print(skip_note, file=sys.stderr)

    derivative_dtypes = [d for d in dtypes if d in ("f32", "f64")]
    totals: dict = {}
    for dt in dtypes:
        kind = ("values", "f64" if dt == "f64" else "f32")
        totals[kind] = totals.get(kind, 0) + value_cells([dt], betas) * len(platforms)
        if dt in derivative_dtypes and not args.no_derivatives:
            totals[("derivatives", dt)] = derivative_cells([dt]) * len(platforms)
    log = Progress(totals)
    results = measure(
        n=args.n,
        n64=args.n64,
        dtypes=dtypes,
        betas=betas,
        log=log,
        platforms=platforms,
    )
    _clear_line()
    print_table(results)
    derivative_rows = []
    if not args.no_derivatives and derivative_dtypes:
        derivative_rows = measure_derivatives(
            n=args.nd,
            n64=args.nd,
            dtypes=derivative_dtypes,
            log=log,
            platforms=platforms,
        )
        _clear_line()
        print("\nDerivatives, per element (PyTorch has no beta derivative):")
        print_rows(derivative_rows, _DERIVATIVE_COLUMNS)
    spot = None
    if not args.no_mpmath:
        spot = mpmath_spot_check()
        print("\nmpmath spot check (max error in float32 ulps, 50-digit truth):")
        for key, value in spot.items():
            print(f"  {key:30} {value:.3f}")
    if args.plot:
        beta = 1.7 if betas is None or 1.7 in betas else betas[0]
        plot(args.plot, beta=beta)
        print(f"\nplot (beta = {beta:g}) written to {args.plot}")
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(
                {
                    "results": [asdict(r) for r in results],
                    "derivatives": [asdict(r) for r in derivative_rows],
                    "mpmath": spot,
                },
                f,
            )
    if args.tables:
        write_tables(
            args.tables, results, derivative_rows, spot, (args.n, args.n64, args.nd)
        )
        print(f"\ntables written to {args.tables}")
    if args.markdown:
        os.makedirs(os.path.dirname(args.markdown) or ".", exist_ok=True)
        with open(args.markdown, "w") as f:
            f.write(markdown_summary(results))
            if derivative_rows:
                f.write("\n**derivatives**, max over every range of |beta|\n\n")
                f.write(derivatives_markdown(derivative_rows))
                f.write("\n**derivatives**, per range of |beta|\n\n")
                f.write(derivatives_markdown(derivative_rows, by_range=True))
    if skip_note:
        print(f"\n{skip_note}")
    print(f"\n{(time.perf_counter() - log.started) / 60:.1f} min on {machine_line()}")
    return results


if __name__ == "__main__":
    main()
