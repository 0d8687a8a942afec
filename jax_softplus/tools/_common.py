"""What the measurement tools share: dtypes, the naive formula, PyTorch."""

from __future__ import annotations

import argparse
import importlib.util
import sys

import jax
import jax.numpy as jnp
import numpy as np

DTYPES = {"f32": jnp.float32, "bf16": jnp.bfloat16, "f16": jnp.float16}
_DTYPE_ALIASES = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}


def parse_dtype(text):
    """'f32' or 'float32' (and so on) to the short name used in the tables."""
    name = text.strip().lower()
    name = _DTYPE_ALIASES.get(name, name)
    if name not in DTYPES:
        choices = ", ".join(f"{k} ({v})" for v, k in _DTYPE_ALIASES.items())
        raise argparse.ArgumentTypeError(f"unknown dtype {text!r}; choose {choices}")
    return name


def require(module, option, parser):
    """Fail before any work if `option` needs an optional package that is
    missing, naming the extra that installs it."""
    if importlib.util.find_spec(module) is None:
        parser.error(
            f"{option} needs {module}, which is not installed: "
            "pip install 'jax-softplus[bench]'"
        )


def sample_data(n, dtype, seed=0):
    """The tools' inputs: src uniform in [-8, 8], diff_dst in [0.5, 1.5]."""
    rng = np.random.default_rng(seed)
    src = jnp.asarray(rng.uniform(-8.0, 8.0, n).astype(np.float32), dtype)
    dd = jnp.asarray(rng.uniform(0.5, 1.5, n).astype(np.float32), dtype)
    return src, dd


def naive_backward(src, dd, beta):
    """The plain formula users would write, in float32, rounded once."""
    f32 = jnp.float32
    out = dd.astype(f32) * jax.nn.sigmoid(jnp.asarray(beta, f32) * src.astype(f32))
    return out.astype(dd.dtype)


def torch_or_none():
    """PyTorch, or None where it is not installed."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def to_torch(torch, x):
    """A JAX array as a CPU tensor of the same float dtype (a writable copy:
    PyTorch warns on read-only NumPy arrays)."""
    dt = {
        np.dtype(jnp.float32): torch.float32,
        np.dtype(jnp.bfloat16): torch.bfloat16,
        np.dtype(jnp.float16): torch.float16,
    }[np.dtype(x.dtype)]
    return torch.from_numpy(np.array(x.astype(jnp.float32))).to(dt)


def print_rows(rows, columns, file=None):
    """Print `rows` as an aligned text table.

    `columns` is a list of (header, function from a row to its text,
    right-aligned?); widths follow the longest cell.
    """
    file = sys.stdout if file is None else file
    cells = [[fmt(r) for _, fmt, _ in columns] for r in rows]
    widths = [
        max([len(head)] + [len(row[i]) for row in cells])
        for i, (head, _, _) in enumerate(columns)
    ]

    def line(values):
        parts = (
            v.rjust(w) if right else v.ljust(w)
            for v, w, (_, _, right) in zip(values, widths, columns, strict=True)
        )
        return " ".join(parts).rstrip()

    head = line([h for h, _, _ in columns])
    print(head, file=file)
    print("-" * len(head), file=file)
    for row in cells:
        print(line(row), file=file)
