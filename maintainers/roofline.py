"""Roofline of the CPU loops: `python maintainers/roofline.py`.

For each dtype, the loop that XLA:CPU compiles for the in-place op (as
`softplus_backward_inplace.lower(...).compile()` builds it), for the op
inside a user's plain `jax.jit` (donated), for the naive formula under a
plain `jax.jit`, and for a donated `a * b`:

- **instructions per iteration** and elements per iteration, read from the
  object code XLA dumps (`objdump -d`, x86-64);
- **the throughput bound** of that loop on this machine: its vector
  instructions at the rate this core issues independent vector instructions,
  or its divides at the divider's rate, whichever is slower. Both rates are
  measured here, by two calibration loops that XLA compiles the same way
  (eight independent chains of mixed float and integer vector ops; eight
  independent divides), so no table of instruction latencies is assumed;
- **measured cycles per element** (per core; XLA splits each loop over the
  cores): in the L3 cache, where the loop is bound by its own instructions
  (the time of 2n elements less that of n, n = 1M by default, which cancels
  the fixed cost of a call), and at 16M and 128M elements, where memory
  takes over. The clock is measured too, by a chain of dependent integer
  adds (one per cycle on every x86-64 core).

measured / bound says how close the loop runs to its instruction
throughput; what is left is latency (the loop's dependency chain against
the out-of-order window) and, at the large sizes, memory: compare with the
a * b row. It is at least 1 when the calibration measured the core's issue
rate: a loop cannot retire its instructions faster than that. (Calibration
loops of one step per chain ran at the L3 cache's rate instead, 1.17 cycles
per 512-bit instruction on a Zen 4, and the kernels read as 0.5 of their own
bound; the tool says so when a row comes out below 1.)
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import mmap
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax import lax

from jax_softplus import softplus_backward, softplus_backward_inplace
from tools._common import (
    DTYPES,
    comma_list,
    cpu_count,
    machine,
    machine_line,
    naive_backward,
    output_dir,
    parse_beta,
    parse_dtype,
    print_rows,
    sample_data,
)
from tools.bench import format_size, parse_size

_INSN = re.compile(r"\s*([0-9a-f]+):\s+(\S+)\s*(.*)")
_VECTOR_REG = re.compile(r"\b([xyz]mm\d+|k[0-7])\b")


@dataclass
class Loop:
    """The hottest loop of a compiled kernel."""

    instructions: list  # (mnemonic, operands)
    elements: int  # elements of the data per iteration
    width: int  # widest vector register, in bits

    @property
    def vector(self):
        return sum(1 for op, args in self.instructions if _VECTOR_REG.search(args))

    @property
    def divides(self):
        return sum(1 for op, _ in self.instructions if op.startswith(("vdiv", "vsqrt")))


def _objdump():
    tool = shutil.which("objdump") or shutil.which("llvm-objdump")
    if tool is None:
        raise RuntimeError("reading XLA's object code needs objdump (binutils)")
    return tool


def _loops(path, itemsize):
    """Every loop (a backward jump) in an object file, as `Loop`s."""
    text = subprocess.run(
        [_objdump(), "-d", "--no-show-raw-insn", "-M", "intel", path],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    insns = []
    for line in text.splitlines():
        m = _INSN.match(line)
        if m:
            insns.append((int(m[1], 16), m[2], m[3]))
    loops = []
    for end, (addr, op, args) in enumerate(insns):
        target = re.match(r"([0-9a-f]+) <", args)
        if not (op.startswith("j") and target and int(target[1], 16) < addr):
            continue
        start = next(i for i, ins in enumerate(insns) if ins[0] >= int(target[1], 16))
        body = [(o, a) for _, o, a in insns[start : end + 1]]
        loops.append(Loop(body, _elements(body, itemsize), _width(body)))
    return loops


def _elements(body, itemsize):
    """Elements per iteration: the step of the register that indexes the
    arrays (`[base+reg*scale]`), times its scale, over the element size."""
    text = " ".join(a for _, a in body)
    indexed = re.findall(r"\[\w+\+(\w+)\*(\d)", text)
    if not indexed:
        return 0
    reg, scale = Counter(indexed).most_common(1)[0][0]
    step = 0
    for op, args in body:
        parts = [p.strip() for p in args.split(",")]
        if op in ("add", "sub") and len(parts) == 2 and parts[0] == reg:
            try:
                value = int(parts[1], 16)
            except ValueError:
                continue
            step = abs(value - (1 << 64) if value >= 1 << 63 else value)
    return step * int(scale) // itemsize


def _width(body):
    regs = " ".join(a for _, a in body)
    return 512 if "zmm" in regs else 256 if "ymm" in regs else 128


def hot_loop(lowered, itemsize, options=None) -> Loop:
    """The loop with the most instructions in what XLA:CPU compiles for a
    `jax.stages.Lowered` (with `options` added to its compiler options)."""
    with tempfile.TemporaryDirectory() as d:
        lowered.compile(compiler_options={**(options or {}), "xla_dump_to": d})
        files = glob.glob(os.path.join(d, "*.o"))
        if not files:
            raise RuntimeError("XLA dumped no object code (xla_dump_to)")
        loops = [loop for f in files for loop in _loops(f, itemsize)]
    if not loops:
        raise RuntimeError("no loop found in XLA's object code")
    return max(loops, key=lambda loop: len(loop.instructions))


# The clock ------------------------------------------------------------------
# 16 dependent `add rdx, rcx` (rcx = 1) per iteration: 16 cycles on any
# x86-64 core. Not `add rdx, 1`: Intel cores from Golden Cove on execute
# adds of an immediate at rename, off the dependency chain (that chain read
# 22 GHz on a Xeon with avx512_fp16).
_ADD_CHAIN = (
    bytes.fromhex("31d2")  # xor edx, edx
    + bytes.fromhex("b901000000")  # mov ecx, 1
    + bytes.fromhex("4889f8")  # mov rax, rdi
    + bytes.fromhex("4801ca") * 16  # add rdx, rcx
    + bytes.fromhex("48ffc8")  # dec rax
    + bytes([0x75, 256 - (16 * 3 + 3 + 2)])  # jnz back to the first add
    + bytes.fromhex("4889d0c3")  # mov rax, rdx; ret
)


def clock_hz(iterations=20_000_000, repeats=5):
    """The core's clock under load, from a chain of dependent adds (the best
    of `repeats` runs); None where machine code cannot be run (not x86-64
    System V, or no W+X pages)."""
    samples = clock_samples(iterations, repeats)
    return max(samples) if samples else None


# A clock that moves more than this between runs makes cycle counts as
# uncertain: the tool says so.
CLOCK_SPREAD_WARNING = 0.10


def clock_spread(samples):
    """(max - min) / max of the clock's runs."""
    return (max(samples) - min(samples)) / max(samples) if samples else 0.0


def clock_samples(iterations=20_000_000, repeats=5):
    """The clock of each of `repeats` runs of the add chain, in Hz ([] where
    machine code cannot be run)."""
    if platform.machine().lower() not in ("x86_64", "amd64") or os.name != "posix":
        return []
    try:
        page = mmap.mmap(
            -1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC
        )
    except (OSError, AttributeError):
        return []
    page.write(_ADD_CHAIN)
    buf = ctypes.c_char.from_buffer(page)
    chain = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_uint64)(ctypes.addressof(buf))
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        adds = chain(iterations)
        samples.append(adds / (time.perf_counter() - t0))
    del chain, buf
    page.close()
    return samples


# Timing ---------------------------------------------------------------------


def seconds_per_call(compiled, src, dd, beta, budget=0.6, rounds=5):
    """Time of one call of a compiled kernel that donates its second
    argument, its outputs chained so that calls queue back to back: the best
    of `rounds` (other work on a shared machine only ever adds time)."""
    dd = jnp.array(dd, copy=True)
    dd = compiled(src, dd, beta)
    dd.block_until_ready()
    t0 = time.perf_counter()
    dd = compiled(src, dd, beta)
    dd.block_until_ready()
    calls = max(3, int(budget / rounds / max(time.perf_counter() - t0, 1e-6)))
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            dd = compiled(src, dd, beta)
        dd.block_until_ready()
        times.append((time.perf_counter() - t0) / calls)
    return min(times)


# Calibration ------------------------------------------------------------------


def _tree_sum(terms):
    while len(terms) > 1:
        terms = [a + b for a, b in zip(terms[::2], terms[1::2], strict=True)]
    return terms[0]


def _mixed(src, dd, beta):
    """Eight independent chains of float and integer vector ops, each six
    steps long: about 150 instructions per vector loaded, so that the loop
    is bound by its instructions, not by the cache (with one step each, a
    512-bit loop ran at the L3's rate and read as half the issue rate, and
    the kernels beat their own bound)."""
    x, y = src.astype(jnp.float32), dd.astype(jnp.float32)
    terms = []
    for i in range(8):
        a = x
        for j in range(6):
            a = lax.max(a * jnp.float32(1.0 + (i + 8 * j) / 64) + beta, y)
            bits = lax.bitcast_convert_type(a, jnp.int32) + jnp.int32(i + j + 1)
            a = lax.bitcast_convert_type(bits, jnp.float32)
        terms.append(a)
    return _tree_sum(terms).astype(dd.dtype)


def _divides(src, dd, beta):
    """Eight independent divisions."""
    x, y = src.astype(jnp.float32), dd.astype(jnp.float32)
    return (_tree_sum([x / (y + jnp.float32(i + 1)) for i in range(8)]) + beta).astype(
        dd.dtype
    )


def _cycles(make, n, clock, cores, marginal=False):
    """Cycles per element per core (XLA runs a loop's partitions on every
    core) of what `make(size)` returns, a (compiled, src, dd, beta): at n,
    or, `marginal`, the time that 2n elements take over n, which cancels the
    fixed cost of a call (20-60 us on a 2-core VM: a tenth of a call at 1M
    elements)."""

    def seconds(size):
        compiled, src, dd, beta = make(size)
        return seconds_per_call(compiled, src, dd, beta)

    t = seconds(2 * n) - seconds(n) if marginal else seconds(n)
    return t * (clock or 1e9) * cores / n


def _per_instruction(fn, n, clock, cores, counter, width):
    """Cycles (or ns, without a clock) per instruction that `counter` counts
    in the calibration loop `fn`, float32 data in L3, `width`-bit vectors."""
    options = {"xla_cpu_prefer_vector_width": width}
    jitted = jax.jit(fn, donate_argnums=1, compiler_options=options)

    def make(size):
        src, dd = sample_data(size, jnp.float32)
        beta = jnp.float32(1.0)
        return jitted.lower(src, dd, beta).compile(), src, dd, beta

    src, dd = sample_data(n, jnp.float32)
    loop = hot_loop(jitted.lower(src, dd, jnp.float32(1.0)), 4, options)
    if not counter(loop):
        raise RuntimeError(f"the calibration loop {fn.__name__} has none to count")
    # A marginal time lost in noise can come out at or below 0: retried at
    # twice the size, then reported as a failed calibration, never printed.
    for size in (n, 2 * n, 4 * n):
        per_element = _cycles(make, size, clock, cores, marginal=True)
        if per_element > 0:
            return per_element * loop.elements / counter(loop)
    raise RuntimeError(
        f"calibrating {width}-bit {fn.__name__}: the marginal time came out at "
        f"or below 0 three times ({per_element:.3g} per element at {size} "
        "elements); the machine is too noisy: rerun, or with larger --sizes"
    )


@dataclass
class Row:
    dtype: str
    kernel: str
    insns: int
    vector: int
    divides: int
    elements: int
    width: int
    bound: float  # cycles per element
    in_l3: float  # measured cycles per element, L3-resident (marginal)
    past_l3: float  # at the second size
    far_past: float  # at the third

    @property
    def gap(self):
        # A bound of 0 or less comes from calibration timings lost in noise
        # (a marginal time can come out negative at small sizes).
        return self.in_l3 / self.bound if self.bound > 0 else float("nan")


_KERNELS = {
    "jax_softplus in place": softplus_backward_inplace,
    # Where users call it: their own jit, XLA's default options (256-bit
    # vectors on AVX-512 CPUs, where the library's jits take 512).
    "jax_softplus, your jit": jax.jit(
        lambda s, d, b: softplus_backward(s, d, b), donate_argnums=1
    ),
    "naive XLA": jax.jit(naive_backward, donate_argnums=1),
    "a*b (floor)": jax.jit(lambda s, d, b: s * d, donate_argnums=1),
}


def roofline(dtypes, beta, sizes, progress=lambda msg: None):
    cores = cpu_count()
    progress("measuring the clock")
    samples = clock_samples()
    clock = max(samples) if samples else None
    n_cal = sizes[0]
    # Per vector width: on some cores (AMD Zen 4) a 512-bit instruction
    # takes two 256-bit pipes.
    per_vector, per_divide = {}, {}
    for width in (256, 512):
        progress(f"calibrating {width}-bit vector instructions")
        per_vector[width] = _per_instruction(
            _mixed, n_cal, clock, cores, lambda loop: loop.vector, width
        )
        per_divide[width] = _per_instruction(
            _divides, n_cal, clock, cores, lambda loop: loop.divides, width
        )
    rows = []
    for dt in dtypes:
        dtype = DTYPES[dt]
        itemsize = jnp.dtype(dtype).itemsize
        for name, kernel in _KERNELS.items():
            progress(f"{dt} {name}")
            src, dd = sample_data(sizes[0], dtype)
            loop = hot_loop(kernel.lower(src, dd, jnp.float32(beta)), itemsize)
            width = 512 if loop.width == 512 else 256
            bound = max(
                (loop.vector - loop.divides) * per_vector[width],
                loop.divides * per_divide[width],
            ) / max(loop.elements, 1)

            def make(size, kernel=kernel, dtype=dtype):
                src, dd = sample_data(size, dtype)
                b = jnp.float32(beta)
                return kernel.lower(src, dd, b).compile(), src, dd, b

            measured = [_cycles(make, sizes[0], clock, cores, marginal=True)]
            measured += [_cycles(make, n, clock, cores) for n in sizes[1:]]
            rows.append(Row(dt, name, len(loop.instructions), loop.vector,
                            loop.divides, loop.elements, loop.width, bound,
                            *measured))  # fmt: skip
    calibration = {"clock_ghz": (clock or 0) / 1e9, "cores": cores,
                   "clock_runs_ghz": [f / 1e9 for f in samples],
                   "per_vector": per_vector, "per_divide": per_divide}  # fmt: skip
    return rows, calibration


def _columns(sizes):
    first, second, third = (format_size(n) for n in sizes)
    return [
        ("dtype", lambda r: r.dtype, False),
        ("kernel", lambda r: r.kernel, False),
        ("insns/iter", lambda r: str(r.insns), True),
        ("vector", lambda r: str(r.vector), True),
        ("div", lambda r: str(r.divides), True),
        ("elem/iter", lambda r: f"{r.elements} x{r.width}b", True),
        ("bound c/el", lambda r: f"{r.bound:.3f}", True),
        (f"L3 ({first}) c/el", lambda r: f"{r.in_l3:.3f}", True),
        ("L3/bound", lambda r: f"{r.gap:.2f}", True),
        (f"{second} c/el", lambda r: f"{r.past_l3:.3f}", True),
        (f"{third} c/el", lambda r: f"{r.far_past:.3f}", True),
    ]


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python maintainers/roofline.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--dtypes", default="f32,bf16,f16", help="f32, bf16, f16")
    p.add_argument("--beta", type=parse_beta, default=1.7, help="beta (traced)")
    p.add_argument(
        "--sizes",
        default="1M,16M,128M",
        help="three sizes: L3-resident, past the L3, far past it",
    )
    p.add_argument(
        "--tables",
        type=output_dir,
        metavar="DIR",
        help="write roofline.md (and .json) into DIR",
    )
    args = p.parse_args(argv)
    if jax.default_backend() != "cpu":
        p.error(f"the roofline reads XLA:CPU's code, not {jax.default_backend()}'s")
    if platform.machine().lower() not in ("x86_64", "amd64"):
        p.error(f"the roofline reads x86-64 code; this is {platform.machine()}")
    dtypes = comma_list(p, "--dtypes", args.dtypes, parse_dtype, ("f32", "bf16", "f16"))
    sizes = comma_list(p, "--sizes", args.sizes, parse_size)
    if len(sizes) != 3:
        p.error(f"--sizes takes three sizes, got {args.sizes!r}")
    try:
        _objdump()
        rows, cal = roofline(
            dtypes,
            args.beta,
            sizes,
            lambda m: print(f"\r{m:60}", end="", file=sys.stderr, flush=True),
        )
    except RuntimeError as err:
        sys.exit(f"\npython maintainers/roofline.py: {err}")
    print("\r" + " " * 60 + "\r", end="", file=sys.stderr)
    m = machine()
    unit = "cycles" if cal["clock_ghz"] else "ns (no clock measured)"
    print(f"machine: {m['cpu']}, {m['cores']} cores, {m['isa']}; jax {m['jax']}")
    rates = ", ".join(
        f"{w}-bit: {cal['per_vector'][w]:.3f} per vector instruction, "
        f"{cal['per_divide'][w]:.2f} per divide"
        for w in (256, 512)
    )
    runs = cal["clock_runs_ghz"]
    clock = f"clock {cal['clock_ghz']:.2f} GHz (dependent adds"
    clock += (
        f", {min(runs):.2f}-{max(runs):.2f} over {len(runs)} runs)" if runs else ")"
    )
    print(f"{clock}; per core, in {unit}: {rates}")
    spread = clock_spread(runs)
    if spread > CLOCK_SPREAD_WARNING:
        print(
            f"warning: the clock moved by {spread:.0%} between runs (a shared or "
            "throttled core): the cycle counts are uncertain by as much"
        )
    print_rows(rows, _columns(sizes))
    below = [f"{r.dtype} {r.kernel}" for r in rows if r.gap < 1]
    if below:
        print(
            f"warning: {', '.join(below)} ran faster than the throughput bound: "
            "the calibration overstated an instruction's cost (a noisy or "
            "throttled core); rerun"
        )
    if args.tables:
        write_tables(args.tables, rows, cal, sizes, f"{clock}; per core, in {unit}")
    return rows, cal


def write_tables(directory, rows, cal, sizes, clock_line):
    """roofline.md (the docs include it) and roofline.json, naming the
    machine and the measured clock."""
    import json
    from dataclasses import asdict

    os.makedirs(directory, exist_ok=True)
    columns = _columns(sizes)
    lines = [
        "| " + " | ".join(name for name, _, _ in columns) + " |",
        "|" + "|".join("---:" if right else "---" for _, _, right in columns) + "|",
    ]
    for r in rows:
        lines.append("| " + " | ".join(cell(r) for _, cell, _ in columns) + " |")
    m = machine()
    with open(os.path.join(directory, "roofline.md"), "w") as f:
        f.write(
            f"Measured on {machine_line(m)}; {clock_line}. Written by "
            f"`python maintainers/roofline.py --tables {directory}`.\n\n"
        )
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(directory, "roofline.json"), "w") as f:
        rows_json = [asdict(r) for r in rows]
        json.dump({"machine": m, "calibration": cal, "rows": rows_json}, f, indent=1)


if __name__ == "__main__":
    main()
