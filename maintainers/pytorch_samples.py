"""float64 against PyTorch on its own samples: `python maintainers/pytorch_samples.py`.

PyTorch's OpInfo for `nn.functional.softplus` and its module samples for
`nn.Softplus` (`torch.testing._internal`), each drawn `--draws` times with
a different seed: per element, the error of jax_softplus's `softplus` and
of PyTorch's, in float64 ulps of the exact softplus (mpmath at 40 digits,
from the float64 inputs), and the same for `softplus_backward` against
PyTorch's `softplus_backward` with a random diff_dst. PyTorch returns x
where beta x exceeds the sample's threshold (0.2 and -100 among them); the
exact value is softplus's own there too, so those elements count against
PyTorch, not for it. Prints how many elements are worse than PyTorch's by
more than 1 ulp (the bar is none), and the largest excess; `--tables DIR`
writes them to pytorch.md there, with the machine.

Needs torch and expecttest (`pip install torch expecttest`), and mpmath.
"""

from __future__ import annotations

import argparse
import os

import jax
import numpy as np

from jax_softplus import softplus, softplus_backward
from tools import _references as references
from tools._common import (
    machine_line,
    output_dir,
    positive_int,
    require,
    x64,
)


def samples(draws):
    """(x, beta, threshold) float64 NumPy arrays and floats, over `draws`
    seeds of the OpInfo and module samples."""
    import torch
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.testing._internal.common_modules import module_db

    ops = [o for o in op_db if o.name == "nn.functional.softplus"]
    modules = [m for m in module_db if m.module_cls is torch.nn.Softplus]
    for seed in range(draws):
        torch.manual_seed(seed)
        for op in ops:
            for s in op.sample_inputs("cpu", torch.float64, requires_grad=False):
                kw = s.kwargs
                yield s.input.numpy(), kw.get("beta", 1.0), kw.get("threshold", 20.0)
        for m in modules:
            for mi in m.module_inputs_func(
                m,
                device="cpu",
                dtype=torch.float64,
                requires_grad=False,
                training=False,
            ):
                args = mi.constructor_input.args
                beta = args[0] if args else mi.constructor_input.kwargs.get("beta", 1.0)
                thr = args[1] if len(args) > 1 else 20.0
                for x in mi.forward_input.args:
                    yield x.numpy(), beta, thr


def _errors(got, exact):
    return references.derivative_error(got, exact, np.abs(exact.real), np.float64)


def compare(draws=64, seed=0):
    """Per op, one (our errors, PyTorch's, x) per sample, float64 (x64 on
    for the call only)."""
    with x64():
        return _compare(draws, seed)


def _compare(draws, seed):
    import torch

    rng = np.random.default_rng(seed)
    out = {"softplus": [], "softplus_backward": []}
    for x, beta, thr in samples(draws):
        x = np.ravel(np.asarray(x, np.float64))
        if not x.size:
            continue
        tx = torch.from_numpy(x.copy())
        exact = references.exact_values("forward", x, beta)
        ours = np.asarray(softplus(x, float(beta)))
        theirs = torch.nn.functional.softplus(tx, beta, thr).numpy()
        normal = references.normal_exact(exact, np.float64)
        out["softplus"].append(
            (_errors(ours, exact), _errors(theirs, exact), x[normal])
        )
        dd = rng.uniform(-2.0, 2.0, x.size)
        exact = references.exact_values("backward", x, beta, dd)
        ours = np.asarray(softplus_backward(x, dd, float(beta)))
        theirs = torch.ops.aten.softplus_backward(
            torch.from_numpy(dd), tx, float(beta), float(thr)
        ).numpy()
        normal = references.normal_exact(exact, np.float64)
        out["softplus_backward"].append(
            (_errors(ours, exact), _errors(theirs, exact), x[normal])
        )
    return out


def summary(results):
    """Per op: (elements, our max ulp, PyTorch's, elements worse than
    PyTorch's by more than 1 ulp, the largest excess)."""
    out = {}
    for op, rows in results.items():
        ours = np.concatenate([r[0] for r in rows])
        theirs = np.concatenate([r[1] for r in rows])
        excess = ours - theirs
        out[op] = (
            ours.size,
            float(ours.max()),
            float(theirs.max()),
            int(np.count_nonzero(excess > 1.0)),
            float(excess.max()),
        )
    return out


def markdown(rows, draws, torch_version):
    out = [
        f"Measured on {machine_line()}, PyTorch {torch_version}; written by "
        "`python maintainers/pytorch_samples.py --tables docs/tables`. float64, "
        f"PyTorch's own OpInfo and module samples of softplus over {draws} "
        "seeds, errors in ulps of the exact value (mpmath, from the float64 "
        "inputs), per element:\n",
        "| op | elements | jax_softplus, max | PyTorch, max | worse than PyTorch "
        "by > 1 ulp | largest excess over PyTorch |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for op, (n, ours, theirs, worse, excess) in rows.items():
        out.append(
            f"| `{op}` | {n:,} | {ours:.2f} | {theirs:.3g} | {worse} | {excess:.2f} |"
        )
    return "\n".join(out) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python maintainers/pytorch_samples.py",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument(
        "--draws", type=positive_int, default=64, help="seeds of the samples"
    )
    p.add_argument(
        "--tables", type=output_dir, metavar="DIR", help="write pytorch.md there"
    )
    args = p.parse_args(argv)
    require("torch", "python maintainers/pytorch_samples.py", p, "pip install torch")
    import torch

    print(f"torch {torch.__version__}, jax {jax.__version__}, {args.draws} draws")
    rows = summary(compare(args.draws))
    for op, (n, ours, theirs, worse, excess) in rows.items():
        print(
            f"{op}: {n} elements; max error jax_softplus {ours:.3f} ulp, "
            f"PyTorch {theirs:.3g} ulp; worse than PyTorch by more than 1 ulp: "
            f"{worse}; largest excess {excess:.3f} ulp"
        )
    if args.tables:
        os.makedirs(args.tables, exist_ok=True)
        with open(os.path.join(args.tables, "pytorch.md"), "w") as f:
            f.write(markdown(rows, args.draws, torch.__version__))
        print(f"table written to {args.tables}/pytorch.md")


if __name__ == "__main__":
    main()
