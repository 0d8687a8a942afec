"""An adversarial search of the float32 derivatives on every platform's
evaluation: `python maintainers/derivative_search.py`.

Each first and second derivative of both ops (13 quantities) by reverse
mode (`grad` to every order) and `jax.hessian`, for each platform's
evaluation run on this CPU (`jax_softplus.testing.lowered_as`: "cpu",
"cuda" and "tpu"; ROCm's is CUDA's), at random betas log-uniform over the
whole normal float32 range of either sign, on t = beta * src drawn over
the core, near the switch points of the kernels and families, and out to
where any quantity still has a normal value, with diff_dst log-uniform
over float32's range. A float64 reference (`_references.f64_derivatives`,
within about 1e-8 of a float32 ulp) screens every point; the worst points
of each (platform, quantity) are then walked to their neighbours while the
error grows (`_search.refine`), and the maxima confirmed in mpmath at 60
digits.

It prints, per platform and quantity, the maximum error in ulps (of the
exact value, or of the sum of its terms' magnitudes where a derivative has
a zero of its own between them) and where it occurs; `--json PATH` writes
them. `--budget` is the number of random betas per platform (default 400,
about 5M points in all); `--tables DIR` writes derivative-search.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from jax_softplus.testing import lowered_as
from tools import _references as references
from tools import _routes as routes
from tools import _search
from tools._common import (
    comma_list,
    machine_line,
    non_negative_int,
    output_dir,
    output_file,
    positive_int,
)

PLATFORMS = ("cpu", "cuda", "tpu")
_F32 = np.float32
_TINY = float(np.finfo(_F32).tiny)
_MAX = float(np.finfo(_F32).max)


def _quantities():
    out = {}
    for fun in ("softplus", "backward"):
        for p in range(3):
            for q in range(3):
                for r in range(2 if fun == "backward" else 1):
                    if 1 <= p + q + r <= 2:
                        out[f"{fun} d{p}{q}{r}"] = (fun, (p, q, r))
    return out


QUANTITIES = _quantities()
ROUTES = {
    "grad": tuple(QUANTITIES),
    "hessian": tuple(n for n, (_, pqr) in QUANTITIES.items() if sum(pqr) == 2),
}
SWITCHES = tuple(p for q in _search.SWITCHES_DERIVATIVES for p in (q, -q)) + (
    -87.0,
    -88.7,
    -103.3,
    -175.7,
    -192.8,
    -_search._LN2 * 126,
    -_search._LN2 * 253,
)


def draw(n, beta, rng):
    """(src, diff_dst) for one beta: t over the core, near switch points,
    and out to |t| = 600 (log-uniform too), diff_dst log-uniform over
    float32's range, a share of it 1."""
    parts = [
        rng.uniform(-30, 30, n // 4),
        _search.near(SWITCHES, n // 4, rng, relative=1e-6, ulps=2**20),
        rng.uniform(-250, 250, n // 4),
    ]
    rest = n - sum(len(p) for p in parts)
    parts.append(np.exp(rng.uniform(np.log(1e-12), np.log(600), rest)))
    t = np.concatenate(parts) * rng.choice([-1.0, 1.0], n)
    with np.errstate(over="ignore"):
        src = (t / np.float64(beta)).astype(_F32)
    dd = np.exp(rng.uniform(np.log(_TINY), np.log(_MAX), n)) * rng.choice([-1, 1], n)
    dd[rng.uniform(size=n) < 0.2] = 1.0
    # Subnormal operands read as 0 on the CPU; infinite ones are specials.
    dd = dd.astype(_F32)
    ok = np.isfinite(src) & ((np.abs(src) >= _TINY) | (src == 0))
    ok &= np.isfinite(dd) & (np.abs(dd) >= _TINY)
    return src[ok], dd[ok]


def errors(platform, route, names, src, beta, dd, exact=False):
    """{name: error per element in ulps} (NaN where the exact value is not
    a normal float32); float64 reference, or mpmath with `exact`."""
    fn = routes.compiled(route, tuple((n, *QUANTITIES[n]) for n in names))
    with lowered_as(platform) if platform != "cpu" else _nothing():
        got = fn(jnp.asarray(src), jnp.asarray(_F32(beta)), jnp.asarray(dd))
    quantities = {
        n: QUANTITIES[n] for n in (ROUTES[route] if route == "hessian" else names)
    }
    if exact:
        refs = references.exact_derivatives(quantities, src, _F32(beta), dd)
    else:
        refs = references.f64_derivatives(quantities, src, _F32(beta), dd)
    out = {}
    for name in names:
        ref, scale = refs[name]
        if route == "hessian":
            # One JVP gives a column: where another entry of the function
            # overflows, inf times its zero tangent is NaN (for any
            # function); those elements are left out.
            for other in ROUTES[route]:
                if other in refs and QUANTITIES[other][0] == QUANTITIES[name][0]:
                    big = np.abs(np.real(refs[other][0])) > _MAX
                    ref = np.where(big, np.nan, ref)
        e = np.full(src.size, np.nan)
        normal = references.normal_exact(ref, _F32)
        e[normal] = references.derivative_error(
            np.asarray(got[name]), ref, np.asarray(scale, np.float64), _F32
        )
        out[name] = e
    return out


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def search(platform, budget, n, rng, log):
    """{(route, name): (max error, src, beta, diff_dst)} over `budget`
    random betas, then refined and confirmed in mpmath."""
    worst = {}
    with lowered_as(platform):
        for i in range(budget):
            beta = _F32(np.exp(rng.uniform(np.log(_TINY), np.log(_MAX))))
            beta = beta * _F32(rng.choice([-1, 1]))
            src, dd = draw(n, beta, rng)
            for route, names in ROUTES.items():
                for name, e in errors("cpu", route, names, src, beta, dd).items():
                    if not np.any(np.isfinite(e)):
                        continue
                    top = np.argsort(np.nan_to_num(e, nan=-1))[-4:]
                    entry = worst.setdefault((route, name), [])
                    entry += [(float(e[j]), src[j], beta, dd[j]) for j in top]
                    entry.sort(key=lambda v: -v[0])
                    del entry[16:]
            if log and (i + 1) % 20 == 0:
                top = max(worst.items(), key=lambda kv: kv[1][0][0])
                log(
                    f"{platform}: {i + 1}/{budget} betas, worst {top[1][0][0]:.3f} "
                    f"({top[0][1]}, {top[0][0]})"
                )
        out = {}
        for (route, name), entry in worst.items():
            out[(route, name)] = _refine(route, name, entry)
    return out


def _refine(route, name, entry):
    """The local search from the worst points of one quantity (each beta
    on its own), confirmed in mpmath."""
    best = (-1.0, None, None, None)
    for beta in dict.fromkeys(b for _, _, b, _ in entry):
        pts = [(s, d) for _, s, b, d in entry if b == beta]
        start = {
            "src": np.array([s for s, _ in pts], _F32),
            "dd": np.array([d for _, d in pts], _F32),
            "beta": np.asarray(beta, _F32),
        }

        def err(inputs, beta=beta):
            return errors("cpu", route, (name,), inputs["src"], beta, inputs["dd"])[
                name
            ]

        e, at = _search.refine(err, start, _F32, rounds=3, keep=8)
        if e > best[0]:
            best = (e, _F32(at["src"]), _F32(beta), _F32(at["dd"]))
    e, s, b, d = best
    exact = errors("cpu", route, (name,), np.array([s]), b, np.array([d]), True)
    return float(exact[name][0]), float(s), float(b), float(d)


# float64 data ------------------------------------------------------------------
# Every platform evaluates float64 data alike (`_narrow` in float64), so one
# lowering serves. The screen and the reference are mpmath's (60 digits).
_F64 = np.float64
# |t| below which tau = tanh(t / 2) comes from its series, where a reviewer
# found 1.02 ulp; and ranges of log10 |beta|, taken in turn.
_SERIES = 1.4
_BETAS64 = ((-0.03, 0.03), (-3.0, -0.03), (0.03, 3.0))


def _scaled(name):
    """Whether diff_dst scales the quantity (the backward op's, not in
    diff_dst): then an adversarial diff_dst can place its result."""
    fun, (_, _, r) = QUANTITIES[name]
    return fun == "backward" and r == 0


def errors64(route, names, src, beta, dd, refs):
    """{name: error per element in float64 ulps} (NaN where the exact value
    is not normal) of the library against `refs` (exact values at these
    diff_dst, as `references.exact_derivatives` gives them). One jit per
    route: every quantity of it is evaluated, `names` are measured."""
    fn = routes.compiled(route, tuple((n, *QUANTITIES[n]) for n in ROUTES[route]))
    # Padded to a power of two: the local search's batches vary in size,
    # and each size would compile again.
    size = 1 << max(8, (src.size - 1).bit_length())
    pad = size - src.size
    with jax.enable_x64(True):
        x, d = (
            jnp.asarray(np.pad(v, (0, pad), constant_values=1.0)) for v in (src, dd)
        )
        got = fn(x, jnp.asarray(_F64(beta)), d)
        got = {n: np.asarray(v)[: src.size] for n, v in got.items()}
    out = {}
    for name in names:
        ref, scale = refs[name]
        e = np.full(src.size, np.nan)
        normal = references.normal_exact(ref, _F64)
        e[normal] = references.derivative_error(got[name], ref, scale, _F64)
        out[name] = e
    return out


def _times(refs, dd):
    """The exact values `refs` (at diff_dst 1) times diff_dst, as pairs."""
    import mpmath

    out = np.empty(len(dd), complex)
    with mpmath.workdps(60):
        for k, (v, d) in enumerate(zip(refs, dd, strict=True)):
            hi = float(np.real(v))
            exact = mpmath.mpf(hi)
            if hi and np.isfinite(hi):
                exact += mpmath.mpf(float(np.imag(v))) * references._ulp64(hi)
            out[k] = references._pair(exact * mpmath.mpf(float(d)))
    return out


def _draw64(n, beta, rng):
    """src for one beta: half of t in the tanh series' range, a quarter near
    the families' switch points, a quarter within |t| < 40."""
    parts = [
        rng.uniform(-_SERIES, _SERIES, n // 2),
        _search.near(SWITCHES[:8], n // 4, rng, relative=1e-9, ulps=2**30),
    ]
    parts.append(rng.uniform(-40, 40, n - sum(len(q) for q in parts)))
    return (np.concatenate(parts) / beta).astype(_F64)


def _below_a_power_of_two(exact, rng):
    """diff_dst that puts diff_dst * exact just below a power of two, where
    an ulp is smallest against the value: the evaluation's own error, plus
    up to half an ulp of rounding, reads largest there."""
    k = np.floor(np.log2(np.abs(exact))) + rng.integers(-3, 4, exact.size)
    u = np.exp2(-rng.uniform(20, 50, exact.size))
    with np.errstate(all="ignore"):
        dd = (np.exp2(k + 1) * (1 - u) / exact).astype(_F64)
    return np.where(np.isfinite(dd) & (dd != 0), dd, 1.0)


def search64(budget, n, rng, log, tries=8):
    """{(route, name): (max error, src, beta, diff_dst)} for float64 data
    over `budget` betas (1, then log-uniform over `_BETAS64`: near 1 and
    1e-3..1e3, either sign),
    `n` points each, against mpmath: where diff_dst scales the quantity,
    at `tries` diff_dst per point that put the result just below a power of
    two; elsewhere at diff_dst 1, then a local search of src from the
    worst points."""
    worst = {}
    for i in range(budget):
        lo, hi = _BETAS64[i % len(_BETAS64)]
        beta = 1.0 if i == 0 else float(10.0 ** rng.uniform(lo, hi))
        beta *= float(rng.choice([-1, 1])) if i else 1.0
        src = _draw64(n, beta, rng)
        ones = np.ones_like(src)
        unit = references.exact_derivatives(
            {q: QUANTITIES[q] for q in QUANTITIES}, src, _F64(beta), ones
        )
        for route, names in ROUTES.items():
            trials = [(names, ones, unit)]
            for name in filter(_scaled, names):
                for _ in range(tries):
                    dd = _below_a_power_of_two(np.real(unit[name][0]), rng)
                    ref = (_times(unit[name][0], dd), unit[name][1] * np.abs(dd))
                    trials.append(((name,), dd, {name: ref}))
            for chosen, dd, refs in trials:
                for name, e in errors64(route, chosen, src, beta, dd, refs).items():
                    if not np.any(np.isfinite(e)):
                        continue
                    top = np.argsort(np.nan_to_num(e, nan=-1))[-4:]
                    entry = worst.setdefault((route, name), [])
                    entry += [(float(e[j]), src[j], beta, dd[j]) for j in top]
                    entry.sort(key=lambda v: -v[0])
                    del entry[8:]
        if log and (i + 1) % 5 == 0:
            top = max(worst.items(), key=lambda kv: kv[1][0][0])
            log(f"float64: {i + 1}/{budget} betas, worst {top[1][0][0]:.3f} ({top[0]})")
    out = {}
    for (route, name), entry in worst.items():
        best = max(entry, key=lambda v: v[0])
        if not _scaled(name):
            for _, s, b, _ in entry[:4]:

                def err(inputs, b=b, route=route, name=name):
                    x = inputs["src"]
                    ones = np.ones_like(x)
                    refs = references.exact_derivatives(
                        {name: QUANTITIES[name]}, x, _F64(b), ones
                    )
                    return errors64(route, (name,), x, b, ones, refs)[name]

                e, at = _search.refine(err, {"src": np.array([s])}, _F64, rounds=2)
                if e > best[0]:
                    best = (float(e), float(at["src"]), b, 1.0)
        out[(route, name)] = tuple(float(v) for v in best)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python maintainers/derivative_search.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--budget", type=positive_int, default=400, help="random betas per platform"
    )
    p.add_argument("-n", type=positive_int, default=4096, help="points per beta")
    p.add_argument(
        "--platforms", default=",".join(PLATFORMS), help="comma list of platforms"
    )
    p.add_argument(
        "--float64",
        action="store_true",
        help="search float64 data instead (every platform evaluates it alike): "
        "diff_dst chosen to put each result just below a power of two",
    )
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument(
        "--json", type=output_file, metavar="PATH", help="write the maxima as JSON"
    )
    p.add_argument(
        "--tables",
        type=output_dir,
        metavar="DIR",
        help="write derivative-search.md and .json there",
    )
    args = p.parse_args(argv)
    platforms = comma_list(p, "--platforms", args.platforms, str, PLATFORMS)
    started = time.perf_counter()

    def log(msg):
        print(
            f"[{(time.perf_counter() - started) / 60:5.1f} min] {msg}",
            file=sys.stderr,
            flush=True,
        )

    rng = np.random.default_rng(args.seed)
    results = {}
    if args.float64:
        platforms = ["float64"]
    for platform in platforms:
        if platform == "float64":
            found = search64(args.budget, args.n, rng, log)
        else:
            found = search(platform, args.budget, args.n, rng, log)
        for (route, name), (e, s, b, d) in sorted(found.items()):
            print(
                f"{platform:5} {route:8} {name:15} {e:10.3f} ulp  "
                f"src={s!r} beta={b!r} diff_dst={d!r}"
            )
            results.setdefault(platform, {})[f"{name} ({route})"] = {
                "max_ulp": e,
                "src": s,
                "beta": b,
                "diff_dst": d,
            }
    minutes = (time.perf_counter() - started) / 60
    print(machine_line(), f"{minutes:.1f} min")
    data = {
        "machine": machine_line(),
        "minutes": minutes,
        "budget": args.budget,
        "n": args.n,
        "results": results,
    }
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
    if args.tables:
        os.makedirs(args.tables, exist_ok=True)
        name = "derivative-search-f64" if args.float64 else "derivative-search"
        with open(os.path.join(args.tables, f"{name}.json"), "w") as f:
            json.dump(data, f, indent=1)
        with open(os.path.join(args.tables, f"{name}.md"), "w") as f:
            f.write(markdown(data, args.tables))
    return results


_NAMES = {
    "cpu": "CPU",
    "cuda": "CUDA/ROCm lowering",
    "tpu": "TPU lowering",
    "float64": "float64, every platform",
}


def markdown(data, directory) -> str:
    """A row per quantity and route, a column per platform (max ulp), then
    where each maximum is."""
    results = data["results"]
    platforms = list(results)
    rows = list(dict.fromkeys(q for p in platforms for q in results[p]))
    points = data["budget"] * data["n"] * len(platforms)
    if platforms == ["float64"]:
        what = (
            f"`python maintainers/derivative_search.py --float64 --tables "
            f"{directory}`. float64 data (one evaluation on every platform), "
            f"{data['budget']:,} betas (1, then log-uniform over 1e-3..1e3, "
            f"either sign), {data['n']:,} points each (half of t in the tanh "
            "series' range |t| < 1.4, a quarter near the switch points), against "
            "mpmath; where diff_dst scales a quantity, 8 diff_dst per point put "
            "the result just below a power of two (where an ulp is smallest "
            "against the value), elsewhere the worst points are walked to their "
            "neighbours. Max error in float64 ulps:\n"
        )
    else:
        what = (
            f"`python maintainers/derivative_search.py --tables {directory}`. "
            f"float32 data, {data['budget']:,} random betas per platform "
            "(log-uniform over the whole normal range, either sign), "
            f"{data['n']:,} points each (about {points / 1e6:.0f} million in "
            "all), screened in float64, the worst walked to their neighbours and "
            "confirmed in mpmath. Max error in ulps (of the sum of the terms' "
            "magnitudes where a derivative has a zero of its own):\n"
        )
    out = [
        f"Measured on {data['machine']}, in {data['minutes']:.0f} minutes; written "
        f"by {what}",
        "| quantity (route) | " + " | ".join(_NAMES[p] for p in platforms) + " |",
        "|---|" + "---:|" * len(platforms),
    ]
    for q in rows:
        cells = [
            f"{results[p][q]['max_ulp']:.3f}" if q in results[p] else ""
            for p in platforms
        ]
        out.append(f"| {q} | " + " | ".join(cells) + " |")
    out += [
        "",
        "<details markdown>\n<summary>Where the maxima are</summary>\n",
        "| platform | quantity (route) | src | beta | diff_dst |",
        "|---|---|---:|---:|---:|",
    ]
    for p in platforms:
        for q, r in results[p].items():
            out.append(
                f"| {_NAMES[p]} | {q} | {r['src']!r} | {r['beta']!r} | "
                f"{r['diff_dst']!r} |"
            )
    out.append("\n</details>")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    jax.config.update("jax_enable_x64", False)
    main()
