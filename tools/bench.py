"""Benchmark: `python -m tools.bench`.

Every figure is a ratio to a floor timed in the same run, interleaved with
the method it is compared to, in the same mode:

- donated: `softplus_backward_inplace` (and the others with their output
  written over `diff_dst`) against a donated XLA `a * b`;
- fresh: a new output per call, against a non-donated `a * b`;
- fwd+bwd: `softplus` value and gradient under `jit`, against
  `jax.nn.softplus(beta * x) / beta` autodiff (fresh, donated, and on the CPU
  donated with `TUNED_CPU_OPTIONS` passed to both jits);
- float64 (`--float64`, with `jax_enable_x64` on for those rows only): the
  backward op in a user's jit and fwd+bwd, against the same formulas in
  float64.

The backward rows also give each method's time over the naive XLA formula
`dd * jax.nn.sigmoid(beta * src)` ("vs naive") and over PyTorch's
`softplus_backward` ("vs torch", when installed) in the same mode, the
figures the op's speed targets are stated against. The default sizes are 16M
elements and 128M, past the last-level cache of current CPUs.

Absolute times on a shared machine are noisy; ratios taken side by side are
not. `beta` is passed as a traced argument throughout.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import jax
import jax.numpy as jnp
import numpy as np

from jax_softplus import (
    TUNED_CPU_OPTIONS,
    softplus,
    softplus_backward,
    softplus_backward_inplace,
)
from jax_softplus._softplus import MECHANISM
from tools._common import (
    DTYPES,
    comma_list,
    cpu_count,
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
    sample_data,
    to_torch,
    torch_or_none,
    x64,
)

NAIVE = "naive XLA"
TORCH = ("torch", "torch (out=)")  # fresh, donated


@dataclass
class Row:
    mode: str
    method: str
    dtype: str
    size: int
    beta: float
    median_s: float
    ratio: float  # median of per-round ratios to the floor of the same mode
    gbps: float  # (2 reads + 1 write) / median time
    spread: float  # (p90 - p10) / median of the method's times
    # Medians of per-round ratios to the naive XLA formula and to PyTorch in
    # the same mode (the op's targets are stated against them); None where
    # that method was not run.
    vs_naive: float | None = None
    vs_torch: float | None = None


def _mul(src, dd, beta):
    del beta
    return src * dd


class _Donated:
    """Calls `fn(src, dd, beta)` with a donated `dd`, chaining each output
    into the next call so that every call gets a fresh donated buffer."""

    def __init__(self, fn, src, dd, beta):
        self.fn, self.src, self.beta = fn, src, beta
        self.dd = jnp.array(dd, copy=True)

    def __call__(self):
        self.dd = self.fn(self.src, self.dd, self.beta)
        return self.dd


class _Fresh:
    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __call__(self):
        return self.fn(*self.args)


def _torch_methods(src, dd, beta):
    # PyTorch's OpenMP threads spin after each call by default and would slow
    # whatever XLA runs next in the interleaved round.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    torch = torch_or_none()
    if torch is None:
        return {}
    torch.set_num_threads(cpu_count())
    ts, td = to_torch(torch, src), to_torch(torch, dd)
    out = torch.empty_like(td)
    op = torch.ops.aten.softplus_backward
    return {
        "torch": lambda: op(td, ts, beta, 20.0),
        "torch (out=)": lambda: op.grad_input(td, ts, beta, 20.0, grad_input=out),
    }


def _block(x):
    if isinstance(x, jax.Array):
        x.block_until_ready()
    elif isinstance(x, tuple):
        for v in x:
            _block(v)


def _time_round(calls: dict[str, Callable], start: int, settle: float) -> dict:
    """One call of each method, in an order rotated by `start`.

    After each call its result is dropped and, with `settle`, the process
    sleeps that long: the runtime frees buffers (a 64 MiB temporary or
    output) on another thread, and on two cores that cleanup, overlapping
    the next call, slowed whichever method came next by up to 25%.
    """
    names = list(calls)
    start %= len(names)
    out = {}
    for name in names[start:] + names[:start]:
        t0 = time.perf_counter()
        result = calls[name]()
        _block(result)
        out[name] = time.perf_counter() - t0
        del result
        if settle:
            time.sleep(settle)
    return out


def _settle(n):
    # Where calls allocate and free large buffers (fresh outputs, fwd+bwd
    # temporaries), give the runtime's deferred frees time to finish.
    return 0.02 if n >= 1 << 20 else 0.0


def _measure(calls, floor, repeats, progress, settle=0.0):
    """Interleaved rounds; returns per-method times and per-round ratios.

    The order rotates from round to round, so that no method always follows
    the same one; `settle` (seconds) is slept after every call.
    """
    for call in calls.values():  # compile and warm up
        _block(call())
        _block(call())
    times = {name: [] for name in calls}
    for i in range(repeats):
        progress(i)
        for name, t in _time_round(calls, i, settle).items():
            times[name].append(t)
    ratios = {
        name: [t / f for t, f in zip(ts, times[floor], strict=True)]
        for name, ts in times.items()
    }
    return times, ratios


def _ratio_to(ts, other):
    if other is None:
        return None
    return float(np.median([t / u for t, u in zip(ts, other, strict=True)]))


def _rows(mode, dt, n, beta, itemsize, times, ratios):
    rows = []
    naive = times.get(NAIVE)
    torch = next((times[k] for k in TORCH if k in times), None)
    for name, ts in times.items():
        ts = np.asarray(ts)
        med = float(np.median(ts))
        p10, p90 = np.percentile(ts, [10, 90])
        rows.append(
            Row(
                mode=mode,
                method=name,
                dtype=dt,
                size=n,
                beta=beta,
                median_s=med,
                ratio=float(np.median(ratios[name])),
                gbps=3 * n * itemsize / med / 1e9,
                spread=float((p90 - p10) / med),
                vs_naive=_ratio_to(ts, naive),
                vs_torch=_ratio_to(ts, torch),
            )
        )
    return rows


def _data(n, dtype, seed=0):
    """`sample_data`, refusing float64 that x64 would make float32."""
    if jnp.dtype(dtype).itemsize == 8 and not jax.config.jax_enable_x64:
        raise ValueError(f"{jnp.dtype(dtype)} data needs jax_enable_x64 on")
    return sample_data(n, dtype, seed)


def bench_backward(n, dt, beta, repeats, progress, torch=True):
    dtype = DTYPES[dt]
    src, dd = _data(n, dtype)
    b = jnp.float32(beta)
    itemsize = jnp.dtype(dtype).itemsize
    rows = []

    donate = lambda f: jax.jit(f, donate_argnums=1)  # noqa: E731
    tm = _torch_methods(src, dd, beta) if torch else {}
    donated = {
        "a*b (floor)": _Donated(donate(_mul), src, dd, b),
        "jax_softplus": _Donated(softplus_backward_inplace, src, dd, b),
        NAIVE: _Donated(donate(naive_backward), src, dd, b),
    }
    if tm:
        donated["torch (out=)"] = tm["torch (out=)"]
    times, ratios = _measure(donated, "a*b (floor)", repeats, progress)
    rows += _rows("donated", dt, n, beta, itemsize, times, ratios)

    fresh = {
        "a*b (floor)": _Fresh(jax.jit(_mul), src, dd, b),
        "jax_softplus": _Fresh(softplus_backward, src, dd, b),
        NAIVE: _Fresh(jax.jit(naive_backward), src, dd, b),
    }
    if dt == "f32":
        s_np, d_np = np.asarray(src), np.asarray(dd)
        fresh["numpy"] = lambda: d_np / (np.float32(1) + np.exp(-beta * s_np))
    if tm:
        fresh["torch"] = tm["torch"]
    times, ratios = _measure(fresh, "a*b (floor)", repeats, progress, _settle(n))
    rows += _rows("fresh", dt, n, beta, itemsize, times, ratios)
    return rows


def bench_user_jit(n, dt, beta, repeats, progress):
    """The op where users call it: inside their own `jax.jit` with XLA's
    default compiler options (256-bit vectors on AVX-512 CPUs, where the
    library's top-level jits use `TUNED_CPU_OPTIONS`' 512), donated through
    the user's `donate_argnums` and with a fresh output, beside the naive
    formula and `a * b` jitted the same way."""
    dtype = DTYPES[dt]
    src, dd = _data(n, dtype)
    b = jnp.float32(beta)

    def ours(s, d, beta):
        return softplus_backward(s, d, beta)

    methods = {"a*b (floor)": _mul, "jax_softplus": ours, NAIVE: naive_backward}
    return _donated_and_fresh(
        methods, "user jit", dt, n, beta, (src, dd, b), repeats, progress
    )


def _donated_and_fresh(methods, mode, dt, n, beta, args, repeats, progress):
    """Rows for `methods` (functions of (src, diff_dst, beta)) in a user's
    jit, diff_dst donated and then with a fresh output, over `a * b`."""
    itemsize = args[0].dtype.itemsize
    donated = {
        k: _Donated(jax.jit(f, donate_argnums=1), *args) for k, f in methods.items()
    }
    times, ratios = _measure(donated, "a*b (floor)", repeats, progress)
    rows = _rows(f"{mode} donated", dt, n, beta, itemsize, times, ratios)
    fresh = {k: _Fresh(jax.jit(f), *args) for k, f in methods.items()}
    times, ratios = _measure(fresh, "a*b (floor)", repeats, progress, _settle(n))
    return rows + _rows(f"{mode} fresh", dt, n, beta, itemsize, times, ratios)


HIGHEST = "jax_softplus, HIGHEST"


def bench_highest(n, dt, beta, repeats, progress):
    """accuracy=HIGHEST where users call it: inside their own `jax.jit`,
    donated and with a fresh output, beside the default kernel, the naive
    formula and `a * b`, for softplus_backward; `softplus_backward_inplace`
    called eagerly; and softplus (fresh) beside its default and
    `jax.nn.softplus(b * x) / b`."""
    dtype = DTYPES[dt]
    src, dd = _data(n, dtype)
    b = jnp.float32(beta)
    itemsize = jnp.dtype(dtype).itemsize
    highest = jax.lax.AccuracyMode.HIGHEST

    def ours(s, d, beta):
        return softplus_backward(s, d, beta)

    def best(s, d, beta):
        return softplus_backward(s, d, beta, accuracy=highest)

    methods = {"a*b (floor)": _mul, "jax_softplus": ours, HIGHEST: best}
    methods[NAIVE] = naive_backward
    rows = _donated_and_fresh(
        methods, "highest, your jit", dt, n, beta, (src, dd, b), repeats, progress
    )
    # The library's in-place op: at HIGHEST two passes over diff_dst (float32,
    # float16) or a new output (bfloat16).
    donate = functools.partial(jax.jit, donate_argnums=1)
    inplace = {
        "a*b (floor)": _Donated(donate(_mul), src, dd, b),
        "jax_softplus": _Donated(softplus_backward_inplace, src, dd, b),
        HIGHEST: _Donated(
            functools.partial(softplus_backward_inplace, accuracy=highest), src, dd, b
        ),
        NAIVE: _Donated(donate(naive_backward), src, dd, b),
    }
    times, ratios = _measure(inplace, "a*b (floor)", repeats, progress, _settle(n))
    rows += _rows("highest, in place", dt, n, beta, itemsize, times, ratios)
    forward = {
        "a*b (floor)": _Fresh(jax.jit(_mul), src, dd, b),
        "jax_softplus": _Fresh(jax.jit(lambda x, d, c: softplus(x, c)), src, dd, b),
        HIGHEST: _Fresh(
            jax.jit(lambda x, d, c: softplus(x, c, accuracy=highest)), src, dd, b
        ),
        NAIVE: _Fresh(jax.jit(_naive_forward), src, dd, b),
    }
    times, ratios = _measure(forward, "a*b (floor)", repeats, progress, _settle(n))
    rows += _rows("highest, softplus fresh", dt, n, beta, itemsize, times, ratios)
    return rows


def bench_highest_train_step(repeats, progress, batch=512):
    """A training step at HIGHEST beside the default's and the naive
    formula's: an MLP 256-1024-1024-10 of softplus activations (beta 1.7),
    float32, its parameters donated."""
    highest = jax.lax.AccuracyMode.HIGHEST
    activations = {
        NAIVE: lambda h: jax.nn.softplus(1.7 * h) / 1.7,
        "jax_softplus": lambda h: softplus(h, 1.7),
        HIGHEST: lambda h: softplus(h, 1.7, accuracy=highest),
    }

    class Stepper:
        def __init__(self, act):
            self.step, self.params, self.x, self.y = mlp_step(
                act, batch=batch, sizes=(256, 1024, 1024, 10)
            )

        def __call__(self):
            self.params, value = self.step(self.params, self.x, self.y)
            return value

    calls = {k: Stepper(act) for k, act in activations.items()}
    times, ratios = _measure(calls, "jax_softplus", repeats, progress)
    return _rows("highest, train step", "f32", batch, 1.7, 0, times, ratios)


def _naive_forward(x, dd, beta):
    """`jax.nn.softplus(beta * x) / beta` in float32, rounded once (as
    `naive_backward`)."""
    del dd
    f = jnp.float32
    return (jax.nn.softplus(beta.astype(f) * x.astype(f)) / beta).astype(x.dtype)


def highest_markdown(rows) -> str:
    """HIGHEST's time over the naive formula and over the default kernel,
    a row per mode, dtype and size."""
    out = [
        "| mode | dtype | size | HIGHEST over the naive formula "
        "| HIGHEST over the default | default over the naive formula |",
        "|---|---|---:|---:|---:|---:|",
    ]
    cells: dict = {}
    for r in rows:
        if r.mode.startswith("highest"):
            cells.setdefault((r.mode, r.dtype, r.size, r.beta), {})[r.method] = r
    for (mode, dt, n, _), row in cells.items():
        best, default = row[HIGHEST], row["jax_softplus"]
        over_default = best.median_s / default.median_s
        label = mode.removeprefix("highest, ")
        out.append(
            f"| {label} | {dt} | {format_size(n)} | {best.vs_naive:.2f} | "
            f"{over_default:.2f} | {default.vs_naive:.2f} |"
        )
    return "\n".join(out) + "\n"


def bench_fwd_bwd(n, dt, beta, repeats, progress):
    """softplus and its gradient in one jitted call: fresh, donated, and (on
    the CPU) donated with `TUNED_CPU_OPTIONS` on both sides."""
    dtype = DTYPES[dt]
    x, g = _data(n, dtype, seed=1)
    b = jnp.float32(beta)

    def ours(x, g, b):
        y, vjp = jax.vjp(lambda x: softplus(x, b), x)
        return y, vjp(g)[0]

    def ref(x, g, b):
        bx = b.astype(x.dtype)
        y, vjp = jax.vjp(lambda x: jax.nn.softplus(bx * x) / bx, x)
        return y, vjp(g)[0]

    class Chained:
        """Donates x and g; the outputs (y, dx) become the next x and g."""

        def __init__(self, fn, options=None):
            self.fn = jax.jit(fn, donate_argnums=(0, 1), compiler_options=options)
            self.x, self.g = jnp.array(x, copy=True), jnp.array(g, copy=True)

        def __call__(self):
            self.x, self.g = self.fn(self.x, self.g, b)
            return self.x, self.g

    rows = []
    size = 2 * jnp.dtype(dtype).itemsize
    floor = "jax.nn.softplus autodiff"
    calls = {
        floor: _Fresh(jax.jit(ref), x, g, b),
        "jax_softplus": _Fresh(jax.jit(ours), x, g, b),
    }
    times, ratios = _measure(calls, floor, repeats, progress, _settle(n))
    rows += _rows("fwd+bwd", dt, n, beta, size, times, ratios)
    calls = {floor: Chained(ref), "jax_softplus": Chained(ours)}
    times, ratios = _measure(calls, floor, repeats, progress, _settle(n))
    rows += _rows("fwd+bwd donated", dt, n, beta, size, times, ratios)
    if jax.default_backend() == "cpu":
        opts = TUNED_CPU_OPTIONS
        calls = {floor: Chained(ref, opts), "jax_softplus": Chained(ours, opts)}
        times, ratios = _measure(calls, floor, repeats, progress, _settle(n))
        rows += _rows("fwd+bwd tuned", dt, n, beta, size, times, ratios)
    return rows


def bench_scaling(sizes, repeats, progress):
    """Time per element, donated f32, from dispatch-bound to memory-bound."""
    rows = []
    for n in sizes:
        src, dd = sample_data(n, jnp.float32)
        b = jnp.float32(1.7)
        calls = {
            "a*b (floor)": _Donated(jax.jit(_mul, donate_argnums=1), src, dd, b),
            "jax_softplus": _Donated(softplus_backward_inplace, src, dd, b),
        }
        reps = repeats if n >= 1 << 20 else max(repeats, 50)
        times, ratios = _measure(calls, "a*b (floor)", reps, progress)
        rows += _rows("scaling", "f32", n, 1.7, 4, times, ratios)
    return rows


def mlp_step(activation, *, batch=256, sizes=(784, 1024, 1024, 10), seed=0):
    """A jitted SGD step of a softplus MLP (params donated), and its inputs."""
    keys = jax.random.split(jax.random.PRNGKey(seed), len(sizes) + 1)
    params = [
        (jax.random.normal(k, (a, b)) / np.sqrt(a), jnp.zeros(b))
        for k, a, b in zip(keys[:-2], sizes[:-1], sizes[1:], strict=True)
    ]
    x = jax.random.normal(keys[-1], (batch, sizes[0]))
    y = jax.nn.one_hot(jnp.arange(batch) % sizes[-1], sizes[-1])

    def loss(params, x, y):
        h = x
        for w, b in params[:-1]:
            h = activation(h @ w + b[None, :])
        w, b = params[-1]
        logits = h @ w + b[None, :]
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))

    def step(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        new = jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)
        return new, value

    return jax.jit(step, donate_argnums=0), params, x, y


def train_step_activations(beta=1.7):
    return {
        "jax.nn.softplus": lambda h: jax.nn.softplus(beta * h) / beta,
        "jax_softplus": lambda h: softplus(h, beta),
    }


def bench_train_step(repeats, progress, batch=256):
    class Stepper:
        def __init__(self, act):
            self.step, self.params, self.x, self.y = mlp_step(act, batch=batch)
            self.params = jax.tree.map(lambda a: jnp.array(a, copy=True), self.params)

        def __call__(self):
            self.params, value = self.step(self.params, self.x, self.y)
            return value

    calls = {k: Stepper(act) for k, act in train_step_activations().items()}
    times, ratios = _measure(calls, "jax.nn.softplus", repeats, progress)
    # No bandwidth: a step is matrix products, not a stream (itemsize 0).
    return _rows("train step", "f32", batch, 1.7, 0, times, ratios)


# Derivative routes ---------------------------------------------------------
# What users differentiate softplus by, beta learnable, the loss a sum: each
# route in a user's jit with XLA's default options, against the formula
# jax.nn.softplus(b * x) / b differentiated by JAX the same way.


def _loss(f):
    return lambda x, b: f(x, b).sum()


def _nth_beta(f, n):
    g = _loss(f)
    for _ in range(n):
        g = jax.grad(g, 1)
    return g


DERIVATIVE_ROUTES = {
    "grad in beta": lambda f: jax.grad(_loss(f), 1),
    "jax.hessian in beta": lambda f: jax.hessian(_loss(f), 1),
    "grad(grad) in beta": lambda f: _nth_beta(f, 2),
    "jvp(grad) in beta": lambda f: (
        lambda x, b: jax.jvp(
            lambda b: jax.grad(_loss(f), 1)(x, b), (b,), (jnp.ones_like(b),)
        )[1]
    ),
    "third order in beta": lambda f: _nth_beta(f, 3),
    "fourth order in beta": lambda f: _nth_beta(f, 4),
    "2x2 Hessian (x scale, beta)": lambda f: (
        lambda x, b: jax.hessian(lambda s, b: _loss(f)(s * x, b), (0, 1))(
            jnp.ones_like(b), b
        )
    ),
    "gradient penalty (d/dbeta of |grad_x|^2)": lambda f: (
        lambda x, b: jax.grad(lambda b: jnp.sum(jax.grad(_loss(f), 0)(x, b) ** 2), 0)(b)
    ),
    "grad(grad) in x": lambda f: (
        lambda x, b: jax.grad(lambda x: jax.grad(_loss(f), 0)(x, b).sum())(x)
    ),
}
FORMULA = "formula"


def _formula(x, b):
    bx = b.astype(x.dtype)
    return jax.nn.softplus(bx * x) / bx


@dataclass
class DerivativeRow:
    route: str
    dtype: str
    size: int
    median_s: float  # jax_softplus
    formula_s: float
    ratio: float  # median of per-round ratios to the formula
    temps: int  # bytes of temporaries (`memory_analysis`)
    formula_temps: int
    compile_s: float  # trace, lower and compile, a fresh jit
    formula_compile_s: float


def _compile_seconds(fn, *args):
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    return time.perf_counter() - t0, compiled


def bench_derivatives(n, dt, repeats, progress, routes=None):
    """Each route's time, temporaries and compile time over the formula's."""
    dtype = DTYPES[dt]
    x, _ = sample_data(n, dtype, seed=2)
    b = jnp.float32(1.7)
    rows = []
    for name in routes or DERIVATIVE_ROUTES:
        make = DERIVATIVE_ROUTES[name]
        ours, formula = make(softplus), make(_formula)
        compile_times = {"ours": [], "formula": []}
        for _ in range(min(3, repeats)):  # a fresh jit each time, alternating
            for key, fn in (("ours", ours), ("formula", formula)):
                seconds, compiled = _compile_seconds(lambda *a, fn=fn: fn(*a), x, b)
                compile_times[key].append(seconds)
        temps = {
            key: jax.jit(fn).lower(x, b).compile().memory_analysis().temp_size_in_bytes
            for key, fn in (("ours", ours), ("formula", formula))
        }
        calls = {
            FORMULA: _Fresh(jax.jit(formula), x, b),
            "jax_softplus": _Fresh(jax.jit(ours), x, b),
        }
        times, ratios = _measure(calls, FORMULA, repeats, progress, _settle(n))
        rows.append(
            DerivativeRow(
                name,
                dt,
                n,
                float(np.median(times["jax_softplus"])),
                float(np.median(times[FORMULA])),
                float(np.median(ratios["jax_softplus"])),
                int(temps["ours"]),
                int(temps["formula"]),
                float(np.median(compile_times["ours"])),
                float(np.median(compile_times["formula"])),
            )
        )
    return rows


def derivatives_markdown(rows) -> str:
    out = [
        "| route | dtype | size | time | temporaries | compile time |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        temps = (
            f"{r.temps / r.formula_temps:.2f}"
            if r.formula_temps
            else ("0 (none)" if not r.temps else f"{r.temps >> 10} KiB (formula: 0)")
        )
        out.append(
            f"| {_cell(r.route)} | {r.dtype} | {format_size(r.size)} | {r.ratio:.2f} "
            f"| {temps} | {r.compile_s / r.formula_compile_s:.2f} |"
        )
    return "\n".join(out) + "\n"


def _cell(text):
    """Text for a Markdown table cell: its pipes escaped (a route's label
    may hold |grad_x|^2)."""
    return text.replace("|", "\\|")


# Eager calls -------------------------------------------------------------------
# Each kind of argument a user passes outside jit, ours over jax.nn.softplus
# (the backward op over the naive formula, jitted once), timed as the mean of
# a burst of calls (dispatch is asynchronous: a burst is what a loop costs).


class _Chained:
    """fn(src, diff_dst) called again and again, each call's result the next
    one's diff_dst (a donating call deletes its diff_dst)."""

    def __init__(self, fn, src, diff_dst):
        self.fn, self.src, self.diff_dst = fn, src, jnp.copy(diff_dst)

    def __call__(self):
        self.diff_dst = self.fn(self.src, self.diff_dst)
        return self.diff_dst


def _eager_cases():
    x = jnp.linspace(-3.0, 3.0, 1000, dtype=jnp.float32)
    xn = np.asarray(x)
    ones = jnp.ones_like(x)
    # What users write, jitted once; it takes Python floats as they are.
    naive = jax.jit(lambda s, d, b: d * jax.nn.sigmoid(b * s))
    naive_donated = jax.jit(lambda s, d, b: d * jax.nn.sigmoid(b * s), donate_argnums=1)
    beta32 = np.float32(1.7)
    cases = {
        "softplus, Python float": (softplus, jax.nn.softplus, (0.5,)),
        "softplus, NumPy float32 scalar": (
            softplus,
            jax.nn.softplus,
            (np.float32(0.5),),
        ),
        "softplus, NumPy float64 scalar": (
            softplus,
            jax.nn.softplus,
            (np.float64(0.5),),
        ),
        "softplus, NumPy float32[1000]": (softplus, jax.nn.softplus, (xn,)),
        "softplus, NumPy int32[1000]": (
            softplus,
            jax.nn.softplus,
            (np.arange(1000, dtype=np.int32),),
        ),
        "softplus, jax float32[1000]": (softplus, jax.nn.softplus, (x,)),
        "softplus, jax float32 scalar": (
            softplus,
            jax.nn.softplus,
            (jnp.float32(0.5),),
        ),
        # A beta: what users would write instead scales jax.nn.softplus.
        "softplus, jax float32[1000], Python float beta": (
            lambda v: softplus(v, 1.7),
            lambda v: jax.nn.softplus(1.7 * v) / 1.7,
            (x,),
        ),
        "softplus, jax float32[1000], NumPy float32 beta": (
            lambda v: softplus(v, beta32),
            lambda v: jax.nn.softplus(beta32 * v) / beta32,
            (x,),
        ),
        "jax.grad of softplus, float32[1000]": (
            jax.grad(lambda v: softplus(v).sum()),
            jax.grad(lambda v: jax.nn.softplus(v).sum()),
            (x,),
        ),
        "jax.jvp of softplus, float32[1000]": (
            lambda v: jax.jvp(softplus, (v,), (ones,)),
            lambda v: jax.jvp(jax.nn.softplus, (v,), (ones,)),
            (x,),
        ),
        "softplus_backward, jax float32[1000]": (
            lambda s, d: softplus_backward(s, d, 1.7),
            lambda s, d: naive(s, d, 1.7),
            (x, x),
        ),
        "softplus_backward, NumPy float32[1000]": (
            lambda s, d: softplus_backward(s, d, 1.7),
            lambda s, d: naive(s, d, 1.7),
            (xn, xn),
        ),
        "softplus_backward, Python floats": (
            lambda s, d: softplus_backward(s, d, 1.7),
            lambda s, d: naive(s, d, 1.7),
            (0.5, 1.0),
        ),
        # Each call donates the last one's result.
        "softplus_backward_inplace, jax float32[1000]": (
            _Chained(lambda s, d: softplus_backward_inplace(s, d, 1.7), x, ones),
            _Chained(lambda s, d: naive_donated(s, d, 1.7), x, ones),
            (),
        ),
    }
    highest = jax.lax.AccuracyMode.HIGHEST
    cases["softplus at HIGHEST, jax float32[1000]"] = (
        lambda v: softplus(v, accuracy=highest),
        jax.nn.softplus,
        (x,),
    )
    cases["softplus_backward at HIGHEST, jax float32[1000]"] = (
        lambda s, d: softplus_backward(s, d, 1.7, accuracy=highest),
        lambda s, d: naive(s, d, 1.7),
        (x, x),
    )
    if MECHANISM == "custom_vjp":  # JAX 0.8: softplus has no forward mode
        del cases["jax.jvp of softplus, float32[1000]"]
    return cases


@dataclass
class EagerRow:
    call: str
    median_us: float  # jax_softplus, per call
    other_us: float  # jax.nn.softplus (or the naive formula), per call
    ratio: float  # median of per-round ratios
    against: str


def _burst(fn, args, count):
    def run():
        out = None
        for _ in range(count):
            out = fn(*args)
        return out

    return run


def bench_eager(repeats, progress, burst=200):
    rows = []
    for name, (ours, other, args) in _eager_cases().items():
        against = "naive formula" if "backward" in name else "jax.nn.softplus"
        if "inplace" in name:
            against = "naive formula, donated"
        if name.endswith(" beta"):
            against = "jax.nn.softplus(beta x) / beta"
        calls = {
            against: _burst(other, args, burst),
            "jax_softplus": _burst(ours, args, burst),
        }
        times, ratios = _measure(calls, against, repeats, progress)
        rows.append(
            EagerRow(
                name,
                float(np.median(times["jax_softplus"])) / burst * 1e6,
                float(np.median(times[against])) / burst * 1e6,
                float(np.median(ratios["jax_softplus"])),
                against,
            )
        )
    return rows


# Compile time ---------------------------------------------------------------
# What the op adds to a user's compile: a training step traced, lowered and
# compiled from fresh caches, beside the same step with the formula.


@dataclass
class CompileRow:
    program: str
    method: str
    trace_ms: float  # medians over the rounds
    lower_ms: float
    compile_ms: float
    ratio: float  # total over the formula's: the median of per-round ratios
    ops: int  # StableHLO operations in the lowered module


def _stablehlo_ops(lowered) -> int:
    text = lowered.as_text()
    return sum(text.count(f" = {d}.") for d in ("stablehlo", "chlo")) + text.count(
        "stablehlo.return"
    )


def _compile_cases():
    """program -> (method -> (jitted function, its arguments)): the MLP step
    (256-512-512-10, batch 256, `jax.value_and_grad`) and each op alone on
    1K float32 elements with beta traced, at both accuracies."""
    highest = jax.lax.AccuracyMode.HIGHEST
    activations = {
        NAIVE: lambda h: jax.nn.softplus(1.7 * h) / 1.7,
        "jax_softplus": lambda h: softplus(h, 1.7),
        "jax_softplus, HIGHEST": lambda h: softplus(h, 1.7, accuracy=highest),
    }
    cases = {}
    step_case = {}
    for name, act in activations.items():
        step, params, x, y = mlp_step(act, batch=256, sizes=(256, 512, 512, 10))
        step_case[name] = (step, (params, x, y))
    cases["MLP train step"] = step_case
    x = jnp.linspace(-8.0, 8.0, 1024, dtype=jnp.float32)
    b = jnp.float32(1.7)
    cases["softplus_backward, float32[1K]"] = {
        NAIVE: (jax.jit(naive_backward), (x, x, b)),
        "jax_softplus": (jax.jit(softplus_backward), (x, x, b)),
        "jax_softplus, HIGHEST": (
            jax.jit(lambda s, d, b: softplus_backward(s, d, b, accuracy=highest)),
            (x, x, b),
        ),
    }
    cases["softplus, float32[1K]"] = {
        NAIVE: (jax.jit(lambda x, b: jax.nn.softplus(b * x) / b), (x, b)),
        "jax_softplus": (jax.jit(softplus), (x, b)),
        "jax_softplus, HIGHEST": (
            jax.jit(lambda x, b: softplus(x, b, accuracy=highest)),
            (x, b),
        ),
    }
    return cases


def bench_compile(repeats, progress):
    """Trace, lower and compile each case from fresh caches, the methods of a
    program interleaved in each round, each first in turn."""
    rows = []
    for program, methods in _compile_cases().items():
        times = {m: [] for m in methods}
        ops = {}
        order = list(methods)
        for i in range(repeats):
            progress(i)
            # Each method first in turn: the first trace after clearing the
            # caches also pays for jax.numpy's own.
            for method in order[i % len(order) :] + order[: i % len(order)]:
                fn, args = methods[method]
                jax.clear_caches()
                t0 = time.perf_counter()
                traced = fn.trace(*args)
                t1 = time.perf_counter()
                lowered = traced.lower()
                t2 = time.perf_counter()
                lowered.compile()
                t3 = time.perf_counter()
                times[method].append((t1 - t0, t2 - t1, t3 - t2))
                ops[method] = _stablehlo_ops(lowered)
        base = np.array([sum(t) for t in times[NAIVE]])
        for method, ts in times.items():
            ts = np.array(ts)
            rows.append(
                CompileRow(
                    program,
                    method,
                    *(float(v) * 1e3 for v in np.median(ts, axis=0)),
                    float(np.median(ts.sum(axis=1) / base)),
                    ops[method],
                )
            )
    return rows


def compile_markdown(rows) -> str:
    out = [
        "| program | method | trace ms | lower ms | compile ms | over the formula "
        "| StableHLO ops |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r.program} | {r.method} | {r.trace_ms:.1f} | {r.lower_ms:.1f} "
            f"| {r.compile_ms:.1f} | {r.ratio:.2f} | {r.ops} |"
        )
    return "\n".join(out) + "\n"


def eager_markdown(rows) -> str:
    out = [
        "| call | jax_softplus µs | against µs | ratio | against |",
        "|---|---:|---:|---:|---|",
    ]
    for r in rows:
        times = f"{r.median_us:.1f} | {r.other_us:.1f}"
        out.append(f"| {r.call} | {times} | {r.ratio:.2f} | {r.against} |")
    return "\n".join(out) + "\n"


def parse_size(text):
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    try:
        n = int(float(text.rstrip("KMG")) * scale)
    except ValueError:
        raise ValueError(f"bad size {text!r}; use e.g. 4096, 1K, 16M") from None
    if n < 1:
        raise ValueError(f"bad size {text!r}; a size must be at least 1")
    return n


def format_size(n):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def _fmt_ratio(value):
    return "" if value is None else f"{value:.2f}"


_COLUMNS = [
    ("mode", lambda r: r.mode, False),
    ("method", lambda r: r.method, False),
    ("dtype", lambda r: r.dtype, False),
    ("size", lambda r: format_size(r.size), True),
    ("beta", lambda r: f"{r.beta:.2g}", True),
    ("median ms", lambda r: f"{r.median_s * 1e3:.3f}", True),
    ("x floor", lambda r: f"{r.ratio:.2f}", True),
    ("GB/s", lambda r: f"{r.gbps:.1f}" if r.gbps else "", True),
    ("spread", lambda r: f"{r.spread:.2f}", True),
    ("vs naive", lambda r: _fmt_ratio(r.vs_naive), True),
    ("vs torch", lambda r: _fmt_ratio(r.vs_torch), True),
]


def _columns(rows):
    """The columns, without "vs torch" where no row has a PyTorch figure."""
    torch_ran = any(r.vs_torch is not None for r in rows)
    return [c for c in _COLUMNS if torch_ran or c[0] != "vs torch"]


def legend(rows) -> str:
    """What the table's ratios are made of."""
    against = (
        "vs naive, vs torch"
        if any(r.vs_torch is not None for r in rows)
        else "vs naive"
    )
    return (
        "x floor: the median over rounds of (time / time of a*b in the same round "
        f"and mode); {against}: the same against those methods. A median of "
        "per-round ratios need not equal the ratio of the median times: each "
        "round pairs a call with its neighbours', which cancels a shared "
        "machine's drift. spread: (90th - 10th percentile) / median of the "
        "method's own times, its run-to-run noise."
    )


def print_table(rows, file=None):
    print_rows(rows, _columns(rows), file)


def markdown_table(rows) -> str:
    columns = _columns(rows)
    lines = [
        "| " + " | ".join(name for name, _, _ in columns) + " |",
        "|" + "|".join("---:" if right else "---" for _, _, right in columns) + "|",
    ]
    for r in rows:
        lines.append("| " + " | ".join(cell(r) for _, cell, _ in columns) + " |")
    return "\n".join(lines) + "\n"


_SUMMARY_MODES = (
    ("user jit donated", "your jit, donated"),
    ("user jit fresh", "your jit, fresh"),
    ("donated", "library's, in place"),
    ("fresh", "library's, fresh"),
)


def summary_markdown(rows) -> str:
    """jax_softplus's time over the naive formula in the same mode, a row
    per mode and size, a column per dtype and beta (the docs' lead table)."""
    ours = [r for r in rows if r.method == "jax_softplus" and r.vs_naive is not None]
    cols = list(dict.fromkeys((r.dtype, r.beta) for r in ours))
    out = ["| mode | size | " + " | ".join(f"{d} {b:g}" for d, b in cols) + " |"]
    out.append("|---|---:|" + "---:|" * len(cols))
    for mode, label in _SUMMARY_MODES:
        for n in dict.fromkeys(r.size for r in ours if r.mode == mode):
            cells = {(r.dtype, r.beta): r.vs_naive for r in ours
                     if r.mode == mode and r.size == n}  # fmt: skip
            txt = [f"{cells[c]:.2f}" if c in cells else "" for c in cols]
            out.append(f"| {label} | {format_size(n)} | " + " | ".join(txt) + " |")
    fwd = [
        r for r in rows if r.method == "jax_softplus" and r.mode.startswith("fwd+bwd")
    ]
    if fwd:
        cols = list(dict.fromkeys((r.dtype, r.size) for r in fwd))
        heads = " | ".join(f"{d} {format_size(n)}" for d, n in cols)
        out += ["", f"| fwd+bwd, over `jax.nn.softplus` autodiff | {heads} |"]
        out.append("|---|" + "---:|" * len(cols))
        for mode in dict.fromkeys(r.mode for r in fwd):
            cells = {(r.dtype, r.size): r.ratio for r in fwd if r.mode == mode}
            txt = [f"{cells[c]:.2f}" if c in cells else "" for c in cols]
            out.append(f"| {mode} | " + " | ".join(txt) + " |")
    return "\n".join(out) + "\n"


def write_tables(
    directory, rows, m=None, derivative_rows=(), eager_rows=(), compile_rows=()
):
    """The docs' tables: bench-summary.md (the lead table), bench.md (every
    row), bench-derivatives.md, bench-eager.md and bench-compile.md where
    those sections ran, and bench.json, each naming the machine."""
    os.makedirs(directory, exist_ok=True)
    m = m or machine()
    where = f"Measured on {machine_line(m, caches=True)}."
    if rows:
        with open(os.path.join(directory, "bench-summary.md"), "w") as f:
            head = "jax_softplus's time over the naive formula in the same mode"
            cols = "columns: dtype and beta"
            f.write(f"{where} {head} (below 1: faster); {cols}.\n\n")
            f.write(summary_markdown(rows))
        with open(os.path.join(directory, "bench.md"), "w") as f:
            f.write(f"{where}\n\n{markdown_table(rows)}\n{legend(rows)}\n")
    if any(r.mode.startswith("highest") for r in rows):
        with open(os.path.join(directory, "bench-highest.md"), "w") as f:
            f.write(
                f"{where} `accuracy=jax.lax.AccuracyMode.HIGHEST` in a user's "
                "`jax.jit` (XLA's default options), beta 1.7: softplus_backward "
                "donated and with a fresh output, softplus with a fresh output; "
                "and `softplus_backward_inplace` called eagerly (in place). Over "
                "the naive formula: the median of per-round ratios of times; over "
                "the default: the ratio of the median times. The naive "
                "formula: `dd * jax.nn.sigmoid(beta * src)` in float32, or "
                "`jax.nn.softplus(beta * x) / beta`.\n\n"
            )
            f.write(highest_markdown(rows))
    if derivative_rows:
        with open(os.path.join(directory, "bench-derivatives.md"), "w") as f:
            f.write(
                f"{where} Each route in a user's `jax.jit` (XLA's default options), "
                "beta learnable, the loss a sum, over the formula "
                "`jax.nn.softplus(b * x) / b` differentiated the same way: time "
                "(median of per-round ratios), temporaries (`memory_analysis`) and "
                "compile time (trace, lower, compile a fresh jit; median of up to "
                "3). "
                "Below 1: cheaper.\n\n"
            )
            f.write(derivatives_markdown(derivative_rows))
    if eager_rows:
        with open(os.path.join(directory, "bench-eager.md"), "w") as f:
            f.write(
                f"{where} Eager calls (no jit), per call: the mean of a burst of 200 "
                "calls (dispatch is asynchronous), median over interleaved rounds; "
                "ratio: the median of per-round ratios.\n\n"
            )
            f.write(eager_markdown(eager_rows))
    if compile_rows:
        with open(os.path.join(directory, "bench-compile.md"), "w") as f:
            f.write(
                f"{where} Trace, lower and compile of a fresh `jax.jit` (JAX's "
                "caches cleared before each), the methods interleaved in each "
                "round: milliseconds, medians over the rounds; over the formula, "
                "the median of per-round ratios of the totals. The formula: "
                "`jax.nn.softplus(beta * x) / beta` and `dd * "
                "jax.nn.sigmoid(beta * src)`; beta 1.7 (traced for the ops "
                "alone). The MLP step: 256-512-512-10, batch 256, "
                "`jax.value_and_grad`, parameters donated.\n\n"
            )
            f.write(compile_markdown(compile_rows))
    with open(os.path.join(directory, "bench.json"), "w") as f:
        figures = _json(m, rows, derivative_rows, eager_rows, compile_rows)
        json.dump(figures, f, indent=1)


def plot(rows, path, machine_text=None):
    """Ratios to the floor per method at the smallest size timed (by dtype,
    mode and beta) and the scaling curve, side by side; the title names the
    size and, given machine_text, the machine."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scaling = [r for r in rows if r.mode == "scaling"]
    # The scaling panel only where the run timed it (--scaling).
    if scaling:
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 4.5))
    else:
        fig, ax = plt.subplots(1, 1, figsize=(9, 4.5))
    cells = [r for r in rows if r.mode in ("donated", "fresh") or "user" in r.mode]
    size = min((r.size for r in cells), default=0)
    cells = [r for r in cells if r.size == size]
    groups = list(dict.fromkeys((r.mode, r.dtype, r.beta) for r in cells))
    methods = list(dict.fromkeys(r.method for r in cells))
    width = 0.8 / max(1, len(methods))
    for i, m in enumerate(methods):
        vals = [
            next((r.ratio for r in cells if (r.mode, r.dtype, r.beta) == g
                  and r.method == m), np.nan)
            for g in groups
        ]  # fmt: skip
        ax.bar(np.arange(len(groups)) + i * width, vals, width, label=m)
    ax.set_xticks(np.arange(len(groups)) + 0.4 - width / 2)
    labels = [f"{m} {d} b={b:g}" for m, d, b in groups]
    ax.set_xticklabels(labels, fontsize=7, rotation=30, ha="right")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_ylabel("time / time of a*b in the same mode")
    if methods:
        ax.legend(fontsize=7)
    title = f"softplus_backward vs the a*b floor, {format_size(size)} elements"
    if machine_text:
        title += f"\n{machine_text}"
    ax.set_title(title, fontsize=9)
    if scaling:
        _plot_scaling(ax2, scaling)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _plot_scaling(ax2, scaling):
    for m in dict.fromkeys(r.method for r in scaling):
        pts = sorted(
            (r.size, r.median_s / r.size * 1e9) for r in scaling if r.method == m
        )
        if pts:
            ax2.loglog(*zip(*pts, strict=True), marker="o", label=m)
    ax2.set_xlabel("elements")
    ax2.set_ylabel("ns per element (donated, f32)")
    ax2.set_title("scaling: dispatch-bound to memory-bound")
    ax2.grid(alpha=0.3, which="both")
    ax2.legend(fontsize=8)


# The vector extensions that decide how wide XLA's loops are and whether
# half-precision arithmetic is native.
def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m tools.bench",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog=(
            "Each step prints a progress line with the time left. On 2 cores "
            "the docs' run (--user-jit --fwd-bwd --train-step --derivatives "
            "--eager --float64 --highest --repeats 9) took 12 minutes "
            "(docs/tables/timings.md); --avx2 doubles it."
        ),
    )
    p.add_argument(
        "--sizes",
        default="16M,128M",
        help="comma list, e.g. 1K,16M (128M: past the last-level cache), or "
        "none (only the sections asked for)",
    )
    p.add_argument("--dtypes", default="f32,bf16,f16", help="f32, bf16, f16")
    p.add_argument("--betas", default="1.0,1.7", help="comma list")
    p.add_argument(
        "--repeats", type=positive_int, default=15, help="interleaved rounds"
    )
    p.add_argument("--no-torch", action="store_true", help="skip PyTorch")
    p.add_argument("--fwd-bwd", action="store_true", help="also time fwd+bwd")
    p.add_argument(
        "--user-jit",
        action="store_true",
        help="also time the op inside a user's jax.jit (default compiler options)",
    )
    p.add_argument(
        "--scaling",
        nargs="?",
        const="1K,16K,256K,1M,4M,16M,64M",
        default=None,
        help="also time per element over these sizes",
    )
    p.add_argument("--train-step", action="store_true", help="also time an MLP step")
    p.add_argument(
        "--compile",
        action="store_true",
        help="also time tracing, lowering and compiling an MLP step and each op "
        "(fresh caches), at both accuracies, beside the formula",
    )
    p.add_argument(
        "--derivatives",
        nargs="?",
        const="1M,16M",
        default=None,
        help="also time each derivative route against the formula, at these sizes",
    )
    p.add_argument(
        "--float64",
        nargs="?",
        const="16M",
        default=None,
        metavar="SIZES",
        help="also time float64 (x64 on for these rows): your jit and fwd+bwd, at "
        "these sizes (a comma list; 16M if none is given)",
    )
    p.add_argument(
        "--eager",
        action="store_true",
        help="also time eager calls (Python, NumPy and JAX inputs, grad, jvp)",
    )
    p.add_argument(
        "--highest",
        nargs="?",
        const="1M,16M",
        default=None,
        metavar="SIZES",
        help="also time accuracy=HIGHEST in a user's jit and in place at these "
        "sizes (a comma list; 1M,16M if none is given), beside the default kernel "
        "and the naive formula, with the --dtypes and beta 1.7",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a first look in seconds: --sizes 1M --dtypes f32 --repeats 3 "
        "--user-jit --no-torch (explicit sizes, dtypes and repeats win)",
    )
    p.add_argument(
        "--avx2",
        action="store_true",
        help="on an AVX-512 CPU, run the same measurement again with XLA's code "
        "capped at AVX2 (XLA_FLAGS=--xla_cpu_max_isa=AVX2, 256-bit vectors), in "
        "a child process after this one, its tables in --tables DIR/avx2",
    )
    p.add_argument(
        "--json", type=output_file, metavar="PATH", help="write the figures as JSON"
    )
    p.add_argument(
        "--plot", type=plot_file, metavar="PNG", help="write a plot of the ratios"
    )
    p.add_argument(
        "--markdown",
        type=output_file,
        metavar="PATH",
        help="write the table as Markdown",
    )
    p.add_argument(
        "--tables",
        type=output_dir,
        metavar="DIR",
        help="write the docs' tables (bench-summary.md, bench.md, bench.json)",
    )
    argv = sys.argv[1:] if argv is None else list(argv)
    args = p.parse_args(argv)
    if args.quick:
        quick = {"sizes": "1M", "dtypes": "f32", "repeats": 3}
        given = given_options(p, argv, quick)
        for dest, value in quick.items():
            if dest not in given:
                setattr(args, dest, value)
        args.user_jit = args.no_torch = True

    # --sizes none: only the sections asked for.
    none = args.sizes.strip().lower() == "none"
    sizes = [] if none else comma_list(p, "--sizes", args.sizes, parse_size)
    dtypes = comma_list(p, "--dtypes", args.dtypes, parse_dtype, ("f32", "bf16", "f16"))
    betas = comma_list(p, "--betas", args.betas, parse_beta)

    def optional_sizes(option, text):
        return [] if text is None else comma_list(p, option, text, parse_size)

    scaling = optional_sizes("--scaling", args.scaling)
    derivative_sizes = optional_sizes("--derivatives", args.derivatives)
    f64_sizes = optional_sizes("--float64", args.float64)
    highest_sizes = optional_sizes("--highest", args.highest)
    if args.plot:
        require("matplotlib", "--plot", p)
    if args.avx2 and "avx512f" not in machine()["isa"].split():
        p.error("--avx2 reruns under an AVX2 cap: this CPU has no AVX-512 to cap")
    if args.avx2 and "--xla_cpu_max_isa" in os.environ.get("XLA_FLAGS", ""):
        p.error("--avx2: XLA_FLAGS already caps the ISA (--xla_cpu_max_isa)")
    if not args.no_torch and importlib.util.find_spec("torch") is None:
        print("PyTorch is not installed: its columns are skipped (pip install torch).")
    jobs = [(n, dt, b) for n in sizes for dt in dtypes for b in betas]
    total = len(jobs) * (2 if args.user_jit else 1)
    total += len(sizes) * len(dtypes) if args.fwd_bwd else 0
    total += bool(scaling) + bool(args.train_step) + bool(args.eager)
    total += bool(args.compile)
    total += len(derivative_sizes) * len(dtypes) * len(DERIVATIVE_ROUTES)
    total += len(f64_sizes) * (len(betas) + 1)
    total += len(highest_sizes) * len(dtypes) + bool(highest_sizes)
    if not total:
        p.error(
            "nothing to measure: --sizes none leaves the sections asked for "
            "(--scaling, --train-step, --eager, --compile, --derivatives, "
            "--float64, --highest), and none was"
        )
    done = [0]
    started = time.perf_counter()
    tty = sys.stderr.isatty()

    printed = [-1]  # the last step a log line was written for

    def progress_for(label):
        def progress(i):
            # A line redrawn on a terminal; in a log, one line per step (a
            # step may time several modes), with the time left so far.
            if not tty:
                if printed[0] == done[0]:
                    return
                printed[0] = done[0]
            spent = time.perf_counter() - started
            left = spent / done[0] * (total - done[0]) if done[0] else None
            eta = f", about {left / 60:.0f} min left" if left is not None else ""
            where = f"[{done[0] + 1}/{total}{eta}] {label}"
            if tty:
                text = f"\r{where}: round {i + 1}/{args.repeats}"
                print(f"{text:90}", end="", file=sys.stderr, flush=True)
            else:
                print(where, file=sys.stderr, flush=True)

        return progress

    rows = []
    for n, dt, b in jobs:
        label = f"backward {dt} {format_size(n)} beta={b}"
        if args.user_jit:
            rows += bench_user_jit(
                n, dt, b, args.repeats, progress_for("user jit " + label)
            )
            done[0] += 1
        rows += bench_backward(
            n, dt, b, args.repeats, progress_for(label), torch=not args.no_torch
        )
        done[0] += 1
    if args.fwd_bwd:
        for n in sizes:
            for dt in dtypes:
                label = f"fwd+bwd {dt} {format_size(n)}"
                rows += bench_fwd_bwd(n, dt, 1.7, args.repeats, progress_for(label))
                done[0] += 1
    for n in f64_sizes:
        with x64():
            for b in betas:
                label = f"user jit backward f64 {format_size(n)} beta={b}"
                rows += bench_user_jit(n, "f64", b, args.repeats, progress_for(label))
                done[0] += 1
            label = f"fwd+bwd f64 {format_size(n)}"
            rows += bench_fwd_bwd(n, "f64", 1.7, args.repeats, progress_for(label))
            done[0] += 1
    if highest_sizes:
        step = progress_for("HIGHEST train step")
        rows += bench_highest_train_step(args.repeats, step)
        done[0] += 1
    for n in highest_sizes:
        for dt in dtypes:
            label = f"HIGHEST {dt} {format_size(n)}"
            rows += bench_highest(n, dt, 1.7, args.repeats, progress_for(label))
            done[0] += 1
    if scaling:
        rows += bench_scaling(scaling, args.repeats, progress_for("scaling"))
        done[0] += 1
    if args.train_step:
        rows += bench_train_step(args.repeats, progress_for("train step"))
        done[0] += 1
    derivative_rows = []
    for n in derivative_sizes:
        for dt in dtypes:
            for route in DERIVATIVE_ROUTES:
                label = f"derivatives {dt} {format_size(n)}: {route}"
                derivative_rows += bench_derivatives(
                    n, dt, args.repeats, progress_for(label), (route,)
                )
                done[0] += 1
    eager_rows = []
    if args.eager:
        eager_rows = bench_eager(args.repeats, progress_for("eager calls"))
        done[0] += 1
    compile_rows = []
    if args.compile:
        compile_rows = bench_compile(args.repeats, progress_for("compile time"))
        done[0] += 1
    if tty:
        print("\r" + " " * 90 + "\r", end="", file=sys.stderr)
    m = machine()
    print(f"machine: {machine_line(m, caches=True)}")
    if rows:
        print_table(rows)
        print(legend(rows))
    if any(r.mode.startswith("highest") for r in rows):
        print("\naccuracy=HIGHEST in a user's jit and in place:")
        print(highest_markdown(rows))
    if derivative_rows:
        print("\nDerivative routes in a user's jit, over the formula:")
        print(derivatives_markdown(derivative_rows))
    if eager_rows:
        print("\nEager calls, per call:")
        print(eager_markdown(eager_rows))
    if compile_rows:
        print("\nTrace, lower and compile, from fresh caches:")
        print(compile_markdown(compile_rows))
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as f:
            figures = _json(m, rows, derivative_rows, eager_rows, compile_rows)
            json.dump(figures, f, indent=1)
    if args.markdown:
        os.makedirs(os.path.dirname(args.markdown) or ".", exist_ok=True)
        with open(args.markdown, "w") as f:
            f.write(markdown_table(rows))
    if args.tables:
        write_tables(args.tables, rows, m, derivative_rows, eager_rows, compile_rows)
    if args.plot:
        os.makedirs(os.path.dirname(args.plot) or ".", exist_ok=True)
        plot(rows, args.plot, machine_line(m))
    if args.avx2:
        _rerun_avx2(argv, args.tables)
    return rows + derivative_rows + eager_rows + compile_rows


def _rerun_avx2(argv, tables):
    """The same run in a child process whose XLA emits AVX2 code, tables in
    tables/avx2 (the other outputs are this run's alone)."""
    drop = {"--avx2", "--plot", "--json", "--markdown", "--tables"}
    rest, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        name = a.split("=")[0]
        if name in drop:
            skip = "=" not in a and name != "--avx2"
            continue
        rest.append(a)
    if tables:
        rest += ["--tables", os.path.join(tables, "avx2")]
    flags = os.environ.get("XLA_FLAGS", "")
    env = dict(os.environ, XLA_FLAGS=f"{flags} --xla_cpu_max_isa=AVX2".strip())
    print("\nThe same with AVX2 code (XLA_FLAGS=--xla_cpu_max_isa=AVX2):", flush=True)
    import subprocess

    subprocess.run([sys.executable, "-m", "tools.bench", *rest], env=env, check=True)


def _json(m, rows, derivative_rows=(), eager_rows=(), compile_rows=()):
    return {
        "machine": m,
        "rows": [asdict(r) for r in rows],
        "derivatives": [asdict(r) for r in derivative_rows],
        "eager": [asdict(r) for r in eager_rows],
        "compile": [asdict(r) for r in compile_rows],
    }


if __name__ == "__main__":
    main()
