"""What the measurement tools share: dtypes, the naive formula, PyTorch."""

from __future__ import annotations

import argparse
import contextlib
import glob
import importlib.util
import json
import os
import pathlib
import platform
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

DTYPES = {
    "f32": jnp.float32,
    "bf16": jnp.bfloat16,
    "f16": jnp.float16,
    "f64": jnp.float64,
}
_DTYPE_ALIASES = {
    "float32": "f32",
    "bfloat16": "bf16",
    "float16": "f16",
    "float64": "f64",
}


@contextlib.contextmanager
def x64(enabled=True):
    """float64 on (or off) for the block; the previous setting comes back."""
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", enabled)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", previous)


def parse_dtype(text):
    """'f32' or 'float32' (and so on) to the short name used in the tables."""
    name = text.strip().lower()
    name = _DTYPE_ALIASES.get(name, name)
    if name not in DTYPES:
        choices = ", ".join(f"{k} ({v})" for v, k in _DTYPE_ALIASES.items())
        raise argparse.ArgumentTypeError(f"unknown dtype {text!r}; choose {choices}")
    return name


def positive_int(text):
    """An argparse type: an integer of at least 1."""
    return _bounded(text, int, 1, "an integer of at least 1")


def non_negative_int(text):
    """An argparse type: an integer of at least 0."""
    return _bounded(text, int, 0, "an integer of at least 0")


def positive_float(text):
    """An argparse type: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number above 0")
    return value


def parse_beta(text):
    """A beta given on the command line: finite, nonzero (softplus diverges
    at 0) and within float32's range."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not (0 < abs(value) <= float(np.finfo(np.float32).max)):
        raise argparse.ArgumentTypeError(
            f"beta {text!r} is not a finite nonzero number within float32's range"
        )
    return value


def comma_list(parser, option, text, parse, allowed=None):
    """The items of `option`'s comma list, each through `parse` (and among
    `allowed`, if given); an empty list or a bad item is a usage error."""
    items = [v.strip() for v in (text or "").split(",") if v.strip()]
    if not items:
        parser.error(f"{option}: the list is empty; give at least one value")
    out = []
    for v in items:
        try:
            item = parse(v)
        except (ValueError, argparse.ArgumentTypeError) as err:
            parser.error(f"{option}: {err}")
        if allowed is not None and item not in allowed:
            parser.error(f"{option}: {v!r} is none of {', '.join(allowed)}")
        out.append(item)
    return out


def output_file(text):
    """An argparse type: a file path the tool can write once it is done (its
    folder made now), checked before any work, so that a long run does not
    end in a traceback."""
    if not text or os.path.isdir(text):
        what = "a directory" if text else "empty"
        raise argparse.ArgumentTypeError(f"{text!r} is {what}; give a file path")
    _writable_folder(os.path.dirname(text) or ".", text)
    return text


def given_options(parser, argv, dests):
    """Which of `dests` the command line sets, however spelled (`--rep` for
    `--repeats`, `--sizes=1K`): argparse fills only the attributes a
    namespace lacks, so a namespace holding a marker keeps it for the
    others."""
    unset = object()
    probe = argparse.Namespace(**dict.fromkeys(dests, unset))
    parser.parse_args(argv, namespace=probe)
    return {d for d in dests if getattr(probe, d) is not unset}


# What matplotlib's savefig writes without extra packages.
PLOT_FORMATS = ("png", "pdf", "svg", "eps", "ps", "jpg", "jpeg", "webp")


def plot_file(text):
    """An argparse type: `output_file` whose extension names a format
    matplotlib writes (checked before the run, not by savefig after it)."""
    path = output_file(text)
    ext = os.path.splitext(path)[1].lstrip(".").lower()
    if ext not in PLOT_FORMATS:
        shown = f"'.{ext}'" if ext else "no extension"
        raise argparse.ArgumentTypeError(
            f"{text!r} has {shown}; give a plot file ending in "
            + ", ".join(f".{f}" for f in PLOT_FORMATS)
        )
    return path


def output_dir(text):
    """An argparse type: a folder the tool can write its tables into (made
    now), checked before any work."""
    if os.path.exists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a file; give a folder")
    _writable_folder(text, text)
    return text


def input_json(text):
    """An argparse type: a JSON file that can be read and parsed (its path)."""
    try:
        with open(text) as f:
            json.load(f)
    except OSError as err:
        why = err.strerror or str(err)
        raise argparse.ArgumentTypeError(f"cannot read {text!r}: {why}") from None
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r} is not JSON: {err}") from None
    return text


def _writable_folder(folder, given):
    # A file made and removed there: permissions alone do not tell (root
    # may write anywhere but a read-only file system such as /proc).
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        why = err.strerror or str(err)
        raise argparse.ArgumentTypeError(f"cannot write {given!r}: {why}") from None


def _bounded(text, kind, lowest, what):
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or value < lowest:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return value


def require(
    module, option, parser, install='pip install -e ".[bench]" from a checkout'
):
    """Fail before any work if `option` needs an optional package that is
    missing, naming what installs it."""
    if importlib.util.find_spec(module) is None:
        parser.error(f"{option} needs {module}, which is not installed: {install}")


def sample_data(n, dtype, seed=0):
    """The tools' inputs: src uniform in [-8, 8], diff_dst in [0.5, 1.5]."""
    rng = np.random.default_rng(seed)
    src = jnp.asarray(rng.uniform(-8.0, 8.0, n).astype(np.float32), dtype)
    dd = jnp.asarray(rng.uniform(0.5, 1.5, n).astype(np.float32), dtype)
    return src, dd


def naive_backward(src, dd, beta):
    """The plain formula users would write, in float32 (float64 for float64
    data), rounded once."""
    f = jnp.float64 if dd.dtype == jnp.float64 else jnp.float32
    out = dd.astype(f) * jax.nn.sigmoid(jnp.asarray(beta, f) * src.astype(f))
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
        np.dtype(jnp.float64): torch.float64,
    }[np.dtype(x.dtype)]
    wide = jnp.float64 if dt == torch.float64 else jnp.float32
    return torch.from_numpy(np.array(x.astype(wide))).to(dt)


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


def cpu_count():
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1


_ISA_FLAGS = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
              "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16", "asimd",
              "sve", "bf16", "fphp")  # fmt: skip


# x86 microarchitectures by (vendor, family, model): a VM's model name
# ("AMD EPYC") does not say which, and the same kernel's speed does.
_AMD_FAMILIES = {23: "Zen 2", 26: "Zen 5"}
_AMD_FAMILY_25 = ((0x10, 0x1F, "Zen 4"), (0x60, 0x7F, "Zen 4"), (0xA0, 0xAF, "Zen 4c"))
_INTEL_MODELS = {
    0x55: "Skylake-SP/Cascade Lake",
    0x6A: "Ice Lake-SP",
    0x6C: "Ice Lake-SP",
    0x8F: "Sapphire Rapids",
    0xCF: "Emerald Rapids",
    0xAD: "Granite Rapids",
}


def _microarchitecture(vendor, family, model):
    """'Zen 4, family 25 model 17' and the like, or '' off x86."""
    if family is None or model is None:
        return ""
    name = ""
    if vendor == "AuthenticAMD":
        name = _AMD_FAMILIES.get(family, "")
        if family == 25:
            name = next(
                (n for lo, hi, n in _AMD_FAMILY_25 if lo <= model <= hi), "Zen 3"
            )
    elif vendor == "GenuineIntel" and family == 6:
        name = _INTEL_MODELS.get(model, "")
    where = f"family {family} model {model}"
    return f"{name}, {where}" if name else where


def _cpu_info() -> dict:
    """CPU model, vector ISA flags and cache sizes, from Linux's /proc and
    /sys where they exist (empty fields elsewhere)."""
    info = {"model": platform.processor() or platform.machine(), "isa": []}
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    fields: dict = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key in ("model name", "Model") and value:
            info["model"] = value
        elif key in ("flags", "Features") and not info["isa"]:
            flags = set(value.split())
            info["isa"] = [f for f in _ISA_FLAGS if f in flags]
        elif key in ("vendor_id", "cpu family", "model") and key not in fields:
            fields[key] = value
    try:
        family, model = int(fields["cpu family"]), int(fields["model"])
    except (KeyError, ValueError):
        family = model = None
    uarch = _microarchitecture(fields.get("vendor_id"), family, model)
    if uarch:
        info["model"] = f"{info['model']} ({uarch})"
    caches = {}
    for index in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*")):
        try:
            level, kind, size = (
                pathlib.Path(index, name).read_text().strip()
                for name in ("level", "type", "size")
            )
        except OSError:
            continue
        name = f"L{level}" + (
            "d" if kind == "Data" else "i" if kind == "Instruction" else ""
        )
        caches[name] = size
    info["caches"] = caches
    return info


def machine() -> dict:
    """What the figures depend on: printed with every table, kept in --json."""
    cpu = _cpu_info()
    return {
        "cpu": cpu["model"],
        "cores": cpu_count(),
        "isa": " ".join(cpu["isa"]),
        "code": code_class(cpu["isa"]),
        "caches": cpu["caches"],
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()][:4],
        "python": platform.python_version(),
    }


def code_class(isa) -> str:
    """The vector code XLA:CPU emits here: 'AVX-512' or 'AVX2' (x86), as
    the CPU and `XLA_FLAGS=--xla_cpu_max_isa` allow, or '' elsewhere."""
    flags = os.environ.get("XLA_FLAGS", "")
    capped = next(
        (
            f.split("=", 1)[1].upper()
            for f in flags.split()
            if f.startswith("--xla_cpu_max_isa=")
        ),
        None,
    )
    if "avx512f" in isa and capped in (None, "AVX512", "AVX512F"):
        return "AVX-512"
    if "avx2" in isa:
        return "AVX2" + (" (XLA_FLAGS --xla_cpu_max_isa=AVX2)" if capped else "")
    return ""


def machine_line(m=None, caches=False) -> str:
    """The machine in one line, as every table names it: the CPU, its vector
    ISA, and the class of code XLA emits (AVX-512 or AVX2)."""
    m = m or machine()
    cache = ", ".join(f"{k} {v}" for k, v in m["caches"].items()) or "unknown"
    code = f"; {m['code']} code" if m.get("code") else ""
    return (
        f"{m['cpu']}, {m['cores']} cores, {m['isa'] or 'ISA unknown'}"
        + (f", caches {cache}" if caches else "")
        + code
        + f"; jax {m['jax']} on {m['backend']}"
    )
