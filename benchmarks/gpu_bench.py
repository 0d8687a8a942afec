"""GPU check: softplus_backward against the device's memory floor.

Run by benchmarks/gpu.sh on one GPU, from the checkout with PYTHONPATH=.
(the package is pure Python). For each dtype at `--size` elements it times,
interleaved, each writing over a donated buffer (read 2n, write n, except
the copy):

- a device-to-device copy (`-x` under jit, read n, write n);
- a donated `a * b`: the floor;
- `softplus_backward_inplace`, beta traced (the GPU lowering);
- the portable kernel, the lowering that every platform but the CPU and
  GPUs uses (and GPUs used before they had their own): the same function
  jitted and donated, for a before/after in one run;
- the naive formula `dd * jax.nn.sigmoid(beta * src)` in float32, rounded
  once, donated: what a user would write instead (inaccurate in the tail).

It prints GB/s and each method's fraction of the donated `a*b`, times the
MLP training step against `jax.nn.softplus`, and with `--hlo DIR` writes
the optimised HLO of the op and the portable kernel per dtype (the fusions
XLA:GPU forms). `--json` writes the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jax_softplus import _kernels, _math, softplus_backward_inplace
from jax_softplus._validate import BetaHints
from tools._common import (
    DTYPES,
    comma_list,
    input_json,
    naive_backward,
    output_dir,
    output_file,
    positive_int,
)
from tools.bench import mlp_step, train_step_activations


def _timed(fn, iters):
    jax.block_until_ready(fn())
    t0 = time.perf_counter()
    for _ in range(iters):
        out = fn()
    jax.block_until_ready(out)
    return (time.perf_counter() - t0) / iters


def _portable(src, dd, beta):
    return _kernels.backward_kernel(src, dd, beta, BetaHints())


def _half_gpu(**variant):
    """The GPU kernel with an ablation (`_math.sigmoid_times_half_gpu`)."""

    def kernel(src, dd, beta):
        f32 = jnp.float32
        out = _math.sigmoid_times_half_gpu(
            src.astype(f32), dd.astype(f32), beta, **variant
        )
        return out.astype(dd.dtype)

    return jax.jit(kernel, donate_argnums=1)


JITS = {
    "copy": jax.jit(lambda x: -x, donate_argnums=0),  # x + 0 is folded away
    "a*b": jax.jit(lambda a, b, beta: a * b, donate_argnums=1),
    "portable kernel": jax.jit(_portable, donate_argnums=1),
    "naive formula": jax.jit(naive_backward, donate_argnums=1),
    # Ablations of the half-precision GPU kernel (not run for float32).
    "gpu kernel, divide": _half_gpu(divide=True),
    "gpu kernel, no tail": _half_gpu(tail=False),
    "gpu kernel, divide, no tail": _half_gpu(divide=True, tail=False),
}
ABLATIONS = ("gpu kernel, divide", "gpu kernel, no tail", "gpu kernel, divide, no tail")


def _run_dtype(name, size, iters, rounds, hlo_dir):
    dtype = DTYPES[name]
    key = jax.random.PRNGKey(0)
    src = jax.random.uniform(key, (size,), jnp.float32, -8, 8).astype(dtype)
    beta = jnp.float32(1.7)
    methods = ("copy", "a*b", "softplus_backward_inplace", "portable kernel")
    methods += ("naive formula",)
    if name != "f32":
        methods += ABLATIONS
    state = {k: jnp.ones(size, dtype) for k in methods}

    def stepper(method):
        def step():
            if method == "copy":
                state[method] = JITS["copy"](state[method])
            elif method == "softplus_backward_inplace":
                state[method] = softplus_backward_inplace(src, state[method], beta)
            else:
                state[method] = JITS[method](src, state[method], beta)
            return state[method]

        return step

    steps = {m: stepper(m) for m in methods}
    times = {m: [] for m in methods}
    for _ in range(rounds):
        for m, fn in steps.items():
            times[m].append(_timed(fn, iters))
    if hlo_dir is not None:
        small = jnp.ones(1 << 20, dtype)
        for label, text in (
            ("op", softplus_backward_inplace.lower(small, small, beta)),
            ("portable", JITS["portable kernel"].lower(small, small, beta)),
        ):
            path = Path(hlo_dir) / f"hlo_{name}_{label}.txt"
            path.write_text(text.compile().as_text())
    item = jnp.dtype(dtype).itemsize
    rows = []
    floor = np.median(times["a*b"])
    for method, ts in times.items():
        med = float(np.median(ts))
        moved = (2 if method == "copy" else 3) * size * item
        rows.append(
            {
                "dtype": name,
                "size": size,
                "method": method,
                "median_ms": med * 1e3,
                "gbps": moved / med / 1e9,
                "fraction_of_floor": (floor / med) * (moved / (3 * size * item)),
            }
        )
    return rows


def train_step(rounds=100, iters=50):
    """Interleaved medians of the MLP step, ours over jax.nn.softplus."""
    steps = {}
    for label, act in train_step_activations().items():
        step, params, x, y = mlp_step(act)
        state = {"p": jax.tree.map(lambda a: jnp.array(a, copy=True), params)}

        def call(step=step, state=state, x=x, y=y):
            state["p"], value = step(state["p"], x, y)
            return value

        steps[label] = call
    times = {k: [] for k in steps}
    for _ in range(rounds):
        for k, fn in steps.items():
            times[k].append(_timed(fn, iters))
    med = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
    return {"ms": med, "ratio": med["jax_softplus"] / med["jax.nn.softplus"]}


_METHODS = (
    ("softplus_backward_inplace", "`softplus_backward_inplace`"),
    ("portable kernel", "portable kernel"),
    ("naive formula", "naive formula"),
    ("copy", "copy"),
)


def markdown(data, where) -> str:
    """The docs' GPU table from a run's JSON: per dtype, each method's share
    of a donated `a*b`'s bandwidth, and the MLP step's ratio."""
    rows = data["rows"]
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    heads = " | ".join(f"{label}, of `a*b`" for _, label in _METHODS)
    out = [
        f"{where}\n",
        f"| dtype | size | donated `a*b`, GB/s | {heads} |",
        "|---|---:|---:|" + "---:|" * len(_METHODS),
    ]
    for dt in dtypes:
        cell = {r["method"]: r for r in rows if r["dtype"] == dt}
        size = f"{cell['a*b']['size'] >> 20}M"
        shares = " | ".join(
            f"{cell[m]['fraction_of_floor']:.1%}" if m in cell else ""
            for m, _ in _METHODS
        )
        out.append(f"| {dt} | {size} | {cell['a*b']['gbps']:.0f} | {shares} |")
    step = data.get("train_step")
    if step:
        out.append(
            f"\nThe MLP training step (784-1024-1024-10, batch 256, beta 1.7, "
            f"float32) takes {step['ratio']:.3f}x the time of the same step with "
            "`jax.nn.softplus`."
        )
    return "\n".join(out) + "\n"


def _fragment(path, title):
    """A table the run's tools wrote (their first line names the machine,
    which the page's first line names already), under a bold title; "" where
    the run did not write it."""
    if not path.exists():
        return ""
    body = path.read_text().split("\n", 1)[1].strip()
    return f"\n**{title}** ({path.parent.name}/{path.name}).\n\n{body}\n"


_ROW = re.compile(
    r"^(backward|forward)\s+(\w+)\s+(\S+)\s+(.+?\])\s+"
    r"(jax_softplus, on the GPU(?:, HIGHEST)?)\s+([0-9.]+)\s+([0-9.]+)$"
)


def _search_maxima(path):
    """The library's largest error per op and dtype, default and HIGHEST,
    from the accuracy tool's printed rows (`path`, its standard output), with
    the cell where each was met; "" where the run printed none."""
    if not path.exists():
        return ""
    worst = {}
    for line in path.read_text().splitlines():
        m = _ROW.match(line.strip())
        if not m:
            continue
        op, dtype, beta, region, impl, top, _ = m.groups()
        key = (op, dtype, impl.endswith("HIGHEST"))
        if key not in worst or float(top) > worst[key][0]:
            worst[key] = (float(top), beta, region)
    if not worst:
        return ""
    out = [
        f"\n**Accuracy on the GPU** ({path.name}: the largest error in ulps of"
        " each op and dtype over the search's cells, and the cell).\n",
        "| op | dtype | default, max ulp | at beta, region | HIGHEST, max ulp |",
        "|---|---|---:|---|---:|",
    ]
    for op, dtype, highest in sorted(worst):
        if highest:
            continue
        top, beta, region = worst[op, dtype, False]
        high = worst.get((op, dtype, True))
        high = f"{high[0]:.2f}" if high else ""
        out.append(f"| {op} | {dtype} | {top:.2f} | {beta}, {region} | {high} |")
    return "\n".join(out) + "\n"


def render(json_path, directory):
    """docs/tables/gpu.md from a committed run (`--render`): no GPU needed.

    The memory-floor table from the run's JSON, then, where the run wrote
    them beside it (benchmarks/gpu.sh), the bench rows, the accuracy
    search's summaries and the tests' last line.
    """
    path = Path(json_path)
    run = path.parent
    data = json.loads(path.read_text())
    gpu = (run / "gpu.txt").read_text().splitlines()
    # nvidia-smi's CSV: a header, then name, memory, clock per GPU.
    if len(gpu) > 1 and gpu[0].startswith("name"):
        where = f"one {gpu[1].split(',')[0]}"
    else:
        where = "a machine without nvidia-smi (a GPU_SH_QUICK check, not a GPU)"
    where = (
        f"Measured on {where}, jax {data['jax']}, by `bash benchmarks/gpu.sh` "
        f"(`{run.as_posix()}`); written by `python benchmarks/gpu_bench.py "
        f"--render {path.as_posix()} --tables {directory}`. Every method writes "
        "over a donated buffer; each share is of a donated `a*b`'s bandwidth "
        "(both move 3n elements)."
    )
    text = markdown(data, where)
    text += _fragment(run / "bench" / "bench-summary.md", "Time over the naive formula")
    # gpu.sh writes the three sections from three runs, each in its folder
    # (runs before 2026-12-04: one run, one folder).
    for name, folder, title in (
        ("bench-derivatives.md", "derivatives", "Derivative routes"),
        ("bench-eager.md", "eager", "Eager calls"),
    ):
        path = run / folder / name
        text += _fragment(path if path.exists() else run / "bench" / name, title)
    accuracy = run / "accuracy" / "accuracy.md"
    if accuracy.exists():
        summary = accuracy.read_text().split("<details")[0]
        text += f"\n**Accuracy on the GPU** (accuracy/accuracy.md).\n\n{summary}"
    else:  # the search printed its rows, but was stopped before its tables
        text += _search_maxima(run / "accuracy-values.txt")
    derivatives = run / "accuracy" / "derivatives.md"
    if derivatives.exists():
        summary = derivatives.read_text().split("<details")[0]
        text += f"\n**Derivatives on the GPU** (accuracy/derivatives.md).\n\n{summary}"
    tests = run / "tests.txt"
    if tests.exists():
        last = [line for line in tests.read_text().splitlines() if line.strip()]
        if last and re.search(r"\b(passed|failed|error)", last[-1]):
            text += f"\nThe tests on the GPU: `{last[-1].strip('= ')}`.\n"
        else:  # cut off by the step's time limit: no summary line
            text += "\nThe tests on the GPU did not finish in their step's time.\n"
    Path(directory).mkdir(parents=True, exist_ok=True)
    (Path(directory) / "gpu.md").write_text(text)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--size",
        type=positive_int,
        help="elements per array (default 256M on a GPU; required elsewhere)",
    )
    p.add_argument("--dtypes", default="f32,bf16,f16", help="f32, bf16, f16")
    p.add_argument("--iters", type=positive_int, default=20, help="calls per round")
    p.add_argument("--rounds", type=positive_int, default=5, help="interleaved rounds")
    p.add_argument(
        "--step-rounds",
        type=positive_int,
        default=100,
        help="interleaved rounds of the MLP step",
    )
    p.add_argument(
        "--hlo", type=output_dir, metavar="DIR", help="write optimised HLO here"
    )
    p.add_argument("--json", type=output_file, metavar="PATH", help="write the run")
    p.add_argument(
        "--render",
        type=input_json,
        metavar="JSON",
        help="write --tables DIR/gpu.md from a run's JSON",
    )
    p.add_argument("--tables", metavar="DIR", help="with --render: where gpu.md goes")
    args = p.parse_args(argv)
    dtypes = comma_list(p, "--dtypes", args.dtypes, str, ("f32", "bf16", "f16"))
    if args.tables and not args.render:
        p.error("--tables goes with --render (a run writes --json and --hlo)")
    if args.render:
        if not args.tables:
            p.error("--render needs --tables DIR, where gpu.md goes (docs/tables)")
        if not (Path(args.render).parent / "gpu.txt").exists():
            p.error(f"--render: no gpu.txt beside {args.render!r} (a gpu.sh run's)")
        try:
            output_dir(args.tables)
        except argparse.ArgumentTypeError as err:
            p.error(f"--tables: {err}")
        render(args.render, args.tables)
        return
    if args.size is None:
        if jax.default_backend() != "gpu":
            p.error(
                f"no GPU here (JAX's backend is {jax.default_backend()}): this "
                "measures a GPU's memory floor at 256M elements; give --size "
                "to run it here anyway"
            )
        args.size = 256 << 20
    print("devices:", jax.devices(), "jax", jax.__version__)
    rows = []
    for name in dtypes:
        rows += _run_dtype(name, args.size, args.iters, args.rounds, args.hlo)
    print(f"{'dtype':5} {'method':28} {'median ms':>10} {'GB/s':>8} {'of a*b':>8}")
    for r in rows:
        print(
            f"{r['dtype']:5} {r['method']:28} {r['median_ms']:10.3f} "
            f"{r['gbps']:8.0f} {r['fraction_of_floor']:8.1%}"
        )
    step = train_step(rounds=args.step_rounds)
    print(
        f"MLP step: jax_softplus {step['ms']['jax_softplus']:.4f} ms, "
        f"jax.nn.softplus {step['ms']['jax.nn.softplus']:.4f} ms, "
        f"ratio {step['ratio']:.3f}"
    )
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(
                {"jax": jax.__version__, "rows": rows, "train_step": step}, f, indent=1
            )


if __name__ == "__main__":
    main()
