"""Accuracy measurement: `python -m jax_softplus.tools.accuracy`.

Prints the max and mean error in ulps of the result's dtype, per op x dtype
x beta x input region, for jax_softplus and, in the same run, for the
anchors: the naive `diff_dst * sigmoid(beta * src)` under XLA,
`jax.vjp(jax.nn.softplus)`, and PyTorch's `softplus_backward` / `softplus`
when torch is installed. The reference is float64 NumPy, computed from the
rounded inputs; a sample of it is checked against mpmath at 50 digits.

Only inputs whose exact result is a normal number of the dtype count: XLA
on CPU flushes subnormal results to zero.

The references (`jax_softplus.tools.references`) are also what the test
suite measures against.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass

import jax
import jax.numpy as jnp
import numpy as np

from jax_softplus import softplus, softplus_backward
from jax_softplus.tools._common import (
    DTYPES,
    naive_backward,
    parse_dtype,
    print_rows,
    require,
    to_torch,
    torch_or_none,
)
from jax_softplus.tools.references import (
    DERIVATIVE_REFS,
    _f64,
    backward_ref,
    mp_derivatives,
    softplus_ref,
    ulp_error,
)

BETAS = (1.0, 0.5, 3.0, -1.0, 0.1, 7.3, -2.5, 1.7)


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
    return jnp.asarray(t.float().numpy(), dtype)


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


def _regions_for(op, dt):
    if dt == "f16":
        # float16 results are normal only for |t| below about 20.
        return [Region("core [-20, 20]", (-20.0, 20.0), (0.5, 2.0))]
    if op == "backward":
        return [REGIONS["core"], REGIONS["tail"], REGIONS["edge"]]
    return [REGIONS["core"], REGIONS["far"]]


def measure(n=200_000, dtypes=("f32", "bf16", "f16"), betas=BETAS, seed=0, log=None):
    rng = np.random.default_rng(seed)
    results = []
    for dt in dtypes:
        dtype = DTYPES[dt]
        impls = {"backward": _backward_impls(dtype), "forward": _forward_impls(dtype)}
        for beta in betas:
            for op in ("backward", "forward"):
                for region in _regions_for(op, dt):
                    if log:
                        log(f"{op} {dt} beta={beta} {region.name}")
                    src, dd = _inputs(n, beta, dtype, region, rng)
                    if op == "backward":
                        ref = backward_ref(src, dd, beta)
                        calls = {k: (f, (src, dd, beta)) for k, f in impls[op].items()}
                    else:
                        ref = softplus_ref(src, beta)
                        calls = {k: (f, (src, beta)) for k, f in impls[op].items()}
                    for name, (f, args) in calls.items():
                        err = ulp_error(f(*args), ref, dtype)
                        if not err.size:
                            continue
                        results.append(
                            Result(
                                op,
                                dt,
                                beta,
                                region.name,
                                name,
                                float(np.nanmax(err)),
                                float(np.nanmean(err)),
                                int(err.size),
                            )
                        )
    return results


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


def _derivative_impls(sp, bwd) -> dict[str, Callable]:
    """Per-element derivatives of a softplus `sp(x, b)` and its backward op
    `bwd(x, b)` (diff_dst = 1), by JAX autodiff, vectorised over x."""
    per_x = (0, None)
    return {
        "d softplus/d beta": jax.vmap(jax.grad(sp, argnums=1), per_x),
        "d2 softplus/dx2": jax.vmap(jax.hessian(sp), per_x),
        "d2 softplus/dx dbeta": jax.vmap(jax.grad(jax.grad(sp), argnums=1), per_x),
        "d softplus_backward/d src": jax.vmap(jax.grad(bwd), per_x),
        "d softplus_backward/d beta": jax.vmap(jax.grad(bwd, argnums=1), per_x),
    }


def _derivative_anchors():
    def ours_bwd(x, b):
        return softplus_backward(x, jnp.ones_like(x), b)

    def nn_sp(x, b):
        return jax.nn.softplus(b * x) / b

    def nn_bwd(x, b):
        return jax.grad(nn_sp)(x, b)  # what jax.nn.softplus autodiff gives

    return {
        "jax_softplus": _derivative_impls(softplus, ours_bwd),
        "jax.nn.softplus autodiff": _derivative_impls(nn_sp, nn_bwd),
    }


DERIVATIVE_BETAS = (1.0, 1.7, -2.5, 0.1)


def _derivative_ts(n, rng):
    """t over [-120, 120], and the bands around +-88 (a fifth each)."""
    k = max(n // 5, 1)
    return np.concatenate(
        [
            rng.uniform(-120, 120, n - 2 * k),
            rng.uniform(-92, -84, k),
            rng.uniform(84, 92, k),
        ]
    )


def measure_derivatives(
    n=20_000, n64=200, betas=DERIVATIVE_BETAS, dtypes=("f32", "f64"), seed=0, log=None
):
    """Per-element error of every derivative, in ulps of the exact value.

    float32 against `DERIVATIVE_REFS` (float64, no cancellation) at `n`
    points per cell; float64 (x64 switched on for the call) against mpmath
    at 50 digits at `n64` points. Regions: t = beta x over [-120, 120] plus
    the bands [-92, -84] and [84, 92].
    """
    rng = np.random.default_rng(seed)
    results = []
    anchors = _derivative_anchors()
    for beta in betas if "f32" in dtypes else ():
        x = (_derivative_ts(n, rng) / beta).astype(np.float32)
        b = np.float32(beta)
        for quantity, ref_fn in DERIVATIVE_REFS.items():
            if log:
                log(f"{quantity} f32 beta={beta}")
            ref = ref_fn(x.astype(np.float64), np.float64(b))
            for impl, fns in anchors.items():
                err = ulp_error(
                    fns[quantity](jnp.asarray(x), jnp.float32(b)), ref, np.float32
                )
                results.append(_derivative_result(quantity, "f32", beta, impl, err))
    if "f64" in dtypes:
        results += _measure_derivatives64(n64, betas, rng, anchors, log)
    return results


def _measure_derivatives64(n, betas, rng, anchors, log):
    import mpmath

    mpmath.mp.dps = 50
    refs = mp_derivatives()
    results = []
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        for beta in betas:
            x = _derivative_ts(n, rng) / beta
            for quantity, ref_fn in refs.items():
                if log:
                    log(f"{quantity} f64 beta={beta}")
                ref = np.array(
                    [float(ref_fn(mpmath.mpf(v), mpmath.mpf(beta))) for v in x]
                )
                for impl, fns in anchors.items():
                    got = fns[quantity](jnp.asarray(x), jnp.float64(beta))
                    err = ulp_error(got, ref, np.float64)
                    results.append(_derivative_result(quantity, "f64", beta, impl, err))
    finally:
        jax.config.update("jax_enable_x64", previous)
    return results


def _derivative_result(quantity, dt, beta, impl, err):
    err = np.where(np.isnan(err), np.inf, err)  # a NaN where the value is normal
    finite = err[np.isfinite(err)]
    worst = float(np.nanmax(err)) if err.size else float("nan")
    mean = float(np.mean(finite)) if finite.size else float("nan")
    return Result(quantity, dt, beta, "t in [-120, 120]", impl, worst, mean, err.size)


def _fmt_ulp(v):
    if v is None:
        return ""
    if not np.isfinite(v):
        return "NaN/inf"
    return f"{v:.3g}" if v < 1e4 else f"{v:.1e}"


def derivatives_markdown(results) -> str:
    """Max ulp per quantity x dtype, over the betas, one column per impl."""
    impls = list(dict.fromkeys(r.impl for r in results))
    cells: dict = {}
    for r in results:
        key = (r.op, r.dtype)
        row = cells.setdefault(key, {})
        row[r.impl] = max(row.get(r.impl, 0.0), r.max_ulp)
    out = ["| quantity | dtype | " + " | ".join(impls) + " |"]
    out.append("|---|---|" + "---:|" * len(impls))
    for (quantity, dt), row in cells.items():
        vals = [row.get(i) for i in impls]
        txt = [_fmt_ulp(v) for v in vals]
        out.append(f"| {quantity} | {dt} | " + " | ".join(txt) + " |")
    return "\n".join(out) + "\n"


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
        impls = list(dict.fromkeys(r.impl for r in rows))
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
    fig.savefig(path, dpi=110)


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m jax_softplus.tools.accuracy",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("-n", type=int, default=200_000, help="samples per cell")
    p.add_argument("--dtypes", default="f32,bf16,f16", help="f32, bf16, f16")
    p.add_argument(
        "--betas", default=",".join(str(b) for b in BETAS), help="comma list"
    )
    p.add_argument("--no-mpmath", action="store_true", help="skip the mpmath check")
    p.add_argument("--plot", metavar="PNG", help="write the ulp-vs-t plot")
    p.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    p.add_argument("--markdown", metavar="PATH", help="write the summary table")
    p.add_argument(
        "--no-derivatives",
        action="store_true",
        help="skip the table of derivatives (d/d beta, second derivatives)",
    )
    args = p.parse_args(argv)
    try:
        dtypes = [parse_dtype(d) for d in args.dtypes.split(",") if d.strip()]
        betas = [float(b) for b in args.betas.split(",") if b.strip()]
    except (ValueError, argparse.ArgumentTypeError) as err:
        p.error(str(err))
    if not args.no_mpmath:
        require("mpmath", "the mpmath check (skip it with --no-mpmath)", p)
    if not args.no_derivatives:
        require("mpmath", "the derivatives table (skip it with --no-derivatives)", p)
    if args.plot:
        require("matplotlib", "--plot", p)

    def log(msg):
        print(f"\r{msg:70}", end="", file=sys.stderr, flush=True)

    results = measure(n=args.n, dtypes=dtypes, betas=betas, log=log)
    print("\r" + " " * 70 + "\r", end="", file=sys.stderr)
    print_table(results)
    derivatives = []
    if not args.no_derivatives:
        derivatives = measure_derivatives(betas=DERIVATIVE_BETAS, log=log)
        print("\r" + " " * 70 + "\r", end="", file=sys.stderr)
        print("\nEvery derivative, per element (PyTorch has no beta derivative):")
        print_table(derivatives)
        print("\nMax over betas 1, 1.7, -2.5, 0.1:")
        print(derivatives_markdown(derivatives))
    spot = None
    if not args.no_mpmath:
        spot = mpmath_spot_check()
        print("\nmpmath spot check (max error in float32 ulps, 50-digit truth):")
        for key, value in spot.items():
            print(f"  {key:30} {value:.3f}")
    if args.plot:
        plot(args.plot)
        print(f"\nplot written to {args.plot}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "results": [asdict(r) for r in results],
                    "derivatives": [asdict(r) for r in derivatives],
                    "mpmath": spot,
                },
                f,
            )
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown_summary(results))
            if derivatives:
                f.write("\n**derivatives**, max error in ulps\n\n")
                f.write(derivatives_markdown(derivatives))
    return results


if __name__ == "__main__":
    main()
