"""Mutation testing: `python maintainers/mutants.py`.

Each mutant is one realistic change to the package (a coefficient that
drifts, a term dropped, a switch point moved, a check removed, donation
off, a batching axis, a cache key that forgets a field...) that changes
what the library returns somewhere in the documented domain: a clamp
moved within the range where every result rounds the same would be an
equivalent mutant, which no test can kill. The script
copies the checkout once, applies each mutant to the copy in turn, and runs
the test suite against it (`pytest -x`, the files most likely to kill it
first, then the rest); a mutant that the whole suite passes has survived.
It prints each mutant's verdict, the test that killed it and the time it
took, and the score; `--tables DIR` writes mutants.md there.

A survivor means a regression of that kind would pass unseen: add a test
that holds the code to the level it reaches (docs/reliability.md). `--only
NAME` runs the mutants whose names contain NAME.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    name: str
    kind: str  # numerics, rules, validation, dispatch, donation, memory
    path: str  # relative to the checkout
    old: str  # exact text, found once
    new: str
    hint: tuple = ()  # test files to run first


M = Mutant
MUTANTS = (
    # Numerics ---------------------------------------------------------------
    M("float32 expm1 coefficient drifts", "numerics", "jax_softplus/_math.py",
      "0.4999999403953552,", "0.4999995403953552,",
      ("tests/test_backward.py", "tests/test_constants.py")),
    M("float64 exp coefficient drifts", "numerics", "jax_softplus/_math64.py",
      "    0.1666666666666668,", "    0.1666666666666608,",
      ("tests/test_constants.py", "tests/test_float64.py")),
    M("float64 backward's low part xs * pl dropped", "numerics",
      "jax_softplus/_math64.py", "    dl = (l1 + l2) + xs * pl", "    dl = l1 + l2",
      ("tests/test_float64.py", "tests/test_accuracy.py")),
    M("float32 forward tail cut early (175 -> 100)", "numerics",
      "jax_softplus/_math.py", "_ZFWD = _F32(175.0)", "_ZFWD = _F32(100.0)",
      ("tests/test_forward.py",)),
    M("float32 deep tail cut early (192.8 -> 170)", "numerics",
      "jax_softplus/_math.py", "_ZDEEP = _F32(192.8)", "_ZDEEP = _F32(170.0)",
      ("tests/test_backward.py", "tests/test_specials.py")),
    M("float64 beta-derivative switch moved (38 -> 34)", "numerics",
      "jax_softplus/_narrow.py", "np.dtype(np.float64): 38.0}",
      "np.dtype(np.float64): 34.0}", ("tests/test_derivatives.py",)),
    M("TPU tanh series shortened (12 -> 7 terms)", "numerics",
      "jax_softplus/_narrow.py", "_TANH_TERMS = {_F32: 12,", "_TANH_TERMS = {_F32: 7,",
      ("tests/test_higher_order.py", "tests/test_platforms.py")),
    M("TPU exponential loses the product's error", "numerics",
      "jax_softplus/_narrow.py",
      "        self.k, self.pair = _exp_pair(z, lax.neg(jnp.sign(t)) * err)",
      "        self.k, self.pair = _exp_pair(z, lax.neg(jnp.sign(t)) * err * 0)",
      ("tests/test_platforms.py", "tests/test_higher_order.py")),
    M("float32 wide exp polynomial drifts", "numerics", "jax_softplus/_wide.py",
      "    0.041666664403585164,", "    0.041666654403585164,",
      ("tests/test_constants.py", "tests/test_derivatives.py")),
    M("HIGHEST error bound too tight (2**-50 -> 2**-56)", "numerics",
      "jax_softplus/_highest.py", '"backward": 2.0**-50', '"backward": 2.0**-56',
      ("tests/test_highest.py",)),
    M("HIGHEST never doubts (no precise step)", "numerics", "jax_softplus/_rounding.py",
      "    return up, (up != down) & (up == up)",
      "    return up, (up != up) & (up == up)",
      ("tests/test_highest.py", "tests/test_highest_tpu.py")),
    M("HIGHEST forward error bound too tight (2**-49 -> 2**-56)", "numerics",
      "jax_softplus/_highest.py", '"forward": 2.0**-49}', '"forward": 2.0**-56}',
      ("tests/test_highest.py",)),
    M("double-double softplus takes the other side of its select", "numerics",
      "jax_softplus/_highest.py",
      "    return lax.select(pos, s[0], q[0]), lax.select(pos, s[1], q[1])",
      "    return lax.select(pos, q[0], s[0]), lax.select(pos, q[1], s[1])",
      ("tests/test_highest.py",)),
    M("HIGHEST's loop settles one marked element per block", "numerics",
      "jax_softplus/_rounding.py",
      "            row = lax.dynamic_update_slice(row, np.zeros(1, bool), g)",
      "            row = row & False", ("tests/test_highest.py",)),
    M("HIGHEST's loop stops while a block's flag is 1", "numerics",
      "jax_softplus/_rounding.py",
      "return lax.reduce_max(state[2], (0,)) > np.uint32(0)",
      "return lax.reduce_max(state[2], (0,)) > np.uint32(1)",
      ("tests/test_highest.py",)),
    M("HIGHEST's bitmap leaves out a short last word", "numerics",
      "jax_softplus/_rounding.py", "    if whole < n:", "    if False:",
      ("tests/test_highest.py",)),
    M("HIGHEST in place overwrites the elements its first pass marked",
      "numerics", "jax_softplus/_rounding.py",
      "_bits(words)[:n].reshape(target.shape), target, out)",
      "_bits(words)[:n].reshape(target.shape), out, out)",
      ("tests/test_highest.py",)),
    M("HIGHEST's loop writes back what the first pass left", "numerics",
      "jax_softplus/_rounding.py", "            new = exact(*one)\n",
      "            new = _elements(values, at)\n", ("tests/test_highest_tpu.py",)),
    M("HIGHEST's two passes read the written-over operand from its buffer",
      "memory", "jax_softplus/_rounding.py",
      "reads = (*operands[:over], None, *operands[over + 1 :])",
      "reads = operands", ("tests/test_highest.py",)),
    M("HIGHEST in your jit keeps one pass for large arrays", "memory",
      "jax_softplus/_highest.py", "two_passes=inplace or two_passes(dd)",
      "two_passes=inplace", ("tests/test_highest.py",)),
    M("HIGHEST's two-pass threshold counts elements, not bytes", "memory",
      "jax_softplus/_highest.py",
      "return v.size * np.dtype(v.dtype).itemsize >= _TWO_PASSES",
      "return v.size >= _TWO_PASSES", ("tests/test_highest.py",)),
    M("HIGHEST's two passes flag a block by its smallest word", "numerics",
      "jax_softplus/_rounding.py", "    flags = lax.reduce_max(words, (1,))",
      "    flags = lax.reduce_min(words, (1,))", ("tests/test_highest.py",)),
    M("HIGHEST marks bfloat16 elements in doubt through float32", "numerics",
      "jax_softplus/_rounding.py", "    as_bits = np.dtype(dtype) == _BF16",
      "    as_bits = False", ("tests/test_highest.py",)),
    M("HIGHEST's loop reads bfloat16 through a float32 copy", "memory",
      "jax_softplus/_rounding.py", "    if v.dtype != _BF16:", "    if True:",
      ("tests/test_highest.py",)),
    M("double-double exp series cut (23 -> 13 terms)", "numerics",
      "jax_softplus/_dd.py", "math.factorial(n)) for n in range(22, -1, -1))",
      "math.factorial(n)) for n in range(12, -1, -1))", ("tests/test_highest.py",)),
    M("double-double division without its remainder's correction", "numerics",
      "jax_softplus/_dd.py", "    return _words.fast_two_sum(q, r * y)",
      "    return q, r * 0", ("tests/test_highest.py",)),
    M("double-double exp's reduction drops ln 2's third part", "numerics",
      "jax_softplus/_dd.py", "(e - pe) - kf * _LN2[2])", "(e - pe) - kf * 0)",
      ("tests/test_highest.py",)),
    M("double-double log1p series cut (33 -> 17 terms)", "numerics",
      "jax_softplus/_dd.py", "Fraction(n % 2, n) for n in range(65, 0, -1))",
      "Fraction(n % 2, n) for n in range(33, 0, -1))",
      ("tests/test_highest.py",)),
    M("TPU HIGHEST error bound too tight (2**-41 -> 2**-47)", "numerics",
      "jax_softplus/_highest32.py", 'ERROR = {"backward": 2.0**-41,',
      'ERROR = {"backward": 2.0**-47,', ("tests/test_highest_tpu.py",)),
    M("TPU HIGHEST exponential's square loses its low word", "numerics",
      "jax_softplus/_highest32.py", "    sqh, sql = 0.5 * s, 0.5 * se + rh * rl",
      "    sqh, sql = 0.5 * s, 0.5 * se", ("tests/test_highest_tpu.py",)),
    M("TPU HIGHEST softplus rounded before it is taken into [1, 2)", "numerics",
      "jax_softplus/_highest32.py",
      "    return (vh * scale, vl * scale), lax.select(pos, f, kq) + e",
      "    return (vh, vl), lax.select(pos, f, kq)", ("tests/test_highest_tpu.py",)),
    M("HIGHEST half types round the pair's sum to nearest, not odd", "numerics",
      "jax_softplus/_rounding.py",
      "        lax.select(even & inexact, bits + step, bits), s.dtype",
      "        bits, s.dtype", ("tests/test_highest_tpu.py", "tests/test_highest.py")),
    M("float32 expansions distilled once (6 -> 1 passes)", "numerics",
      "jax_softplus/_fe.py", "PASSES = 6", "PASSES = 1",
      ("tests/test_highest_tpu.py",)),
    M("float32-expansion exp series cut (13 -> 9 terms)", "numerics",
      "jax_softplus/_fe.py", "    m = lax.fori_loop(0, 13, term, jnp.zeros_like(x))",
      "    m = lax.fori_loop(4, 13, term, jnp.zeros_like(x))",
      ("tests/test_highest_tpu.py",)),
    M("the corrected division keeps the device's quotient", "numerics",
      "jax_softplus/_math.py", "    fixed = times_pow2(q + div(r, mb), ea - eb)",
      "    fixed = times_pow2(q, ea - eb)", ("tests/test_gpu_kernel.py",)),
    M("the forward op's division left to the device", "numerics",
      "jax_softplus/_math.py",
      "    q = num / beta if ieee_division else _divide(num, beta)",
      "    q = num / beta", ("tests/test_gpu_kernel.py",)),
    M("bfloat16 rounds ties away from even", "numerics", "jax_softplus/_math.py",
      "    lsb = lax.shift_right_logical(bits, np.uint32(16)) & np.uint32(1)",
      "    lsb = np.uint32(1)", ("tests/test_backward.py", "tests/test_properties.py")),
    M("TPU HIGHEST softplus loses a zero's sign", "numerics",
      "jax_softplus/_highest32.py",
      "lax.select(t > 0, xs, jnp.zeros_like(xs) / b)),",
      "lax.select(t > 0, xs, jnp.zeros_like(xs))),",
      ("tests/test_highest_tpu.py",)),
    M("float32-word rounding takes a full ulp below a power of two", "numerics",
      "jax_softplus/_fe.py",
      "    low = lax.select(bits & np.int32(0x7FFFFF) == 0, 0.5 * ulp, ulp)",
      "    low = ulp", ("tests/test_highest_tpu.py",)),
    M("float64 log1p's low-part series cut to its first term", "numerics",
      "jax_softplus/_math64.py",
      "+ fl * (1.0 - fh * (1.0 - fh * (1.0 - fh)))", "+ fl",
      ("tests/test_float64.py", "tests/test_derivatives.py")),
    M("float64 second derivatives' tanh coefficient loses its low word", "numerics",
      "jax_softplus/_narrow.py",
      "rh, rl = _words.mul2(y3, (c2[0], c2[1] + c2l))",
      "rh, rl = _words.mul2(y3, (c2[0], c2[1]))",
      ("tests/test_float64.py", "tests/test_derivatives.py",
       "tests/test_higher_order.py")),
    M("TPU HIGHEST: inf * sigmoid of an overflowed t is NaN", "numerics",
      "jax_softplus/_highest32.py",
      "    keep = jnp.isinf(d) & (t < 0) & ~_math.sigmoid_is_zero(s, b)",
      "    keep = jnp.isinf(d) & (t < 0) & False", ("tests/test_specials.py",)),
    M("the CPU's float32 kernel drops a traced infinite beta's limits", "numerics",
      "jax_softplus/_kernels.py",
      "        if cpu and fma_contracts() and not hints.beta_finite:",
      "        if False:", ("tests/test_specials.py",)),
    # Rules ------------------------------------------------------------------
    M("the backward JVP drops its src term", "rules", "jax_softplus/_derivatives.py",
      "        terms.append((slope * src_dot.astype(cdt)).astype(dtype))",
      "        pass", ("tests/test_autodiff.py", "tests/test_derivatives.py")),
    M("the beta cotangent scaled by 1 + 1e-4", "rules", "jax_softplus/_softplus.py",
      "            return dx, _sum_to(dbeta, beta)",
      "            return dx, _sum_to(dbeta * 1.0001, beta)",
      ("tests/test_autodiff.py", "tests/test_derivatives.py")),
    M("the transpose returns the cotangent itself", "rules",
      "jax_softplus/_primitive.py",
      "    return None, bind(src, ct, beta, beta_hints, accuracy), None",
      "    return None, ct, None",
      ("tests/test_autodiff.py", "tests/test_transforms.py")),
    # Batching everything along axis 0 would be equivalent (the rule returns
    # the axis it used); an operand left where it was mapped is not.
    M("batching leaves an operand on its own axis", "rules",
      "jax_softplus/_primitive.py", "        return jnp.moveaxis(x, d, axis)",
      "        return x", ("tests/test_vmap.py",)),
    M("the result keeps a weak type", "rules", "jax_softplus/_primitive.py",
      "    return src.update(weak_type=False)", "    return src",
      ("tests/test_dropin.py", "tests/test_errors.py")),
    M("lowered_as changes other platforms' lowerings", "rules",
      "jax_softplus/_platforms.py",
      '    if registered == "cpu" and _emulated is not None:',
      "    if _emulated is not None:", ("tests/test_platforms.py",)),
    M("GPUs lose the float64 derivatives", "rules", "jax_softplus/_platforms.py",
      '"0") not in ("1", "true", "True")', '"0") is None',
      ("tests/test_platforms.py",)),
    # Validation ---------------------------------------------------------------
    M("mixed dtypes accepted", "validation", "jax_softplus/_validate.py",
      "    if src.dtype != diff_dst.dtype:\n        raise TypeError(",
      "    if False:\n        raise TypeError(", ("tests/test_errors.py",)),
    M("an infinite beta accepted", "validation", "jax_softplus/_validate.py",
      "    if not math.isfinite(concrete) or abs(concrete) > limit:",
      "    if abs(concrete) > limit and math.isfinite(concrete):",
      ("tests/test_errors.py",)),
    M("a subnormal beta kept", "validation", "jax_softplus/_validate.py",
      "        # XLA on CPU flushes subnormals to zero; do it here, everywhere.\n"
      "        concrete = 0.0",
      "        pass", ("tests/test_specials.py", "tests/test_backward.py")),
    M("HIGHEST ignored (the flag does nothing)", "validation",
      "jax_softplus/_validate.py", '            return "highest"\n        return None',
      "            return None\n        return None", ("tests/test_highest.py",)),
    M("a device beta's check cached without the op that asked", "validation",
      "jax_softplus/_validate.py", "    key = (id(value), cdtype, forward)",
      "    key = (id(value), cdtype)", ("tests/test_errors.py",)),
    M("a Tolerance exactly at a kernel's bound takes HIGHEST", "validation",
      "jax_softplus/_validate.py",
      "        if (ulps and bound <= ulps) or (rtol and bound * eps <= rtol):",
      "        if (ulps and bound < ulps) or (rtol and bound * eps <= rtol):",
      ("tests/test_highest.py",)),
    M("a float64 beta rounding to float32's smallest normal flushed", "validation",
      "jax_softplus/_validate.py",
      "    concrete = float(np.asarray(concrete, cdtype))\n",
      "", ("tests/test_composability.py",)),
    # Dispatch -------------------------------------------------------------------
    M("eager jits forget the accuracy", "dispatch", "jax_softplus/_dispatch.py",
      "    return _BACKWARD(src, diff_dst, beta, hints=hints, accuracy=accuracy)",
      "    return _BACKWARD(src, diff_dst, beta, hints=hints, accuracy=None)",
      ("tests/test_highest.py",)),
    M("the eager path passes beta 1", "dispatch", "jax_softplus/_dispatch.py",
      "        return _number_beta(number, dtype, forward, home)",
      "        return _number_beta(1.0, dtype, forward, home)",
      ("tests/test_forward.py", "tests/test_transfers.py")),
    M("the eager path's data dtype forgets the x64 state", "dispatch",
      "jax_softplus/_validate.py",
      "            return jax.dtypes.canonicalize_dtype(value.dtype)",
      "            return np.dtype(value.dtype)", ("tests/test_errors.py",)),
    M("two objects on one buffer donated as two operands", "donation",
      "jax_softplus/_dispatch.py",
      "    if src is diff_dst or _one_buffer(src, diff_dst):",
      "    if src is diff_dst:", ("tests/test_donation.py",)),
    M("a device beta is copied, not passed as it is", "dispatch",
      "jax_softplus/_dispatch.py",
      "        return given, hints",
      "        return _number_beta(float(checked), checked.dtype, forward, home)",
      ("tests/test_transfers.py",)),
    M("the in-place op passes a 0-d diff_dst as beta too", "donation",
      "jax_softplus/_dispatch.py",
      "        and all(given is not array for array in data)\n", "",
      ("tests/test_donation.py",)),
    M("__jax_array__ values refused", "validation", "jax_softplus/_validate.py",
      '    to_array = getattr(type(value), "__jax_array__", None)',
      "    to_array = None", ("tests/test_dropin.py",)),
    M("lowered_as keeps what was compiled before it", "dispatch",
      "jax_softplus/testing.py",
      "    _platforms.set_emulated(platform)\n    jax.clear_caches()",
      "    _platforms.set_emulated(platform)", ("tests/test_platforms.py",)),
    M("the eager path checks beta for float32 data whatever the data", "dispatch",
      "jax_softplus/_backward.py",
      "        dtype = _validate.backward_dtype(src, diff_dst)",
      "        dtype = jnp.dtype(jnp.float32)", ("tests/test_composability.py",)),
    # Donation -------------------------------------------------------------------
    M("in place without donation", "donation", "jax_softplus/_dispatch.py",
      '    _inplace,\n    donate_argnames=("diff_dst",),',
      "    _inplace,\n    donate_argnames=(),", ("tests/test_donation.py",)),
    M("a weakly typed diff_dst not donated", "donation", "jax_softplus/_backward.py",
      "        and given.weak_type\n", "        and False\n",
      ("tests/test_donation.py",)),
)  # fmt: skip


def _copy(dest: Path) -> None:
    """The checkout, less what is not source (venvs, caches, git)."""
    ignore = shutil.ignore_patterns(
        ".git", ".venv", ".ci-*", "__pycache__", ".pytest_cache", ".hypothesis",
        "site", "*.egg-info", ".ruff_cache",
    )  # fmt: skip
    shutil.copytree(ROOT, dest, ignore=ignore, dirs_exist_ok=True)


def _first_failure(output: str) -> str:
    m = re.search(r"^FAILED (\S+)", output, re.M) or re.search(
        r"^ERROR (\S+)", output, re.M
    )
    return m.group(1) if m else "(no test named: see the log)"


# The tests each mutant runs against: the default tier (`pytest`'s own
# selection, pyproject.toml), or every tier but bigmem.
TIERS = {"default": [], "full": ["-m", "not bigmem"]}


def _suite(copy: Path, hint=(), timeout=None, tier="full"):
    """(return code, output) of the suite on the copy, `hint` files first."""
    tests = sorted(str(p.relative_to(copy)) for p in (copy / "tests").glob("test_*.py"))
    order = list(hint) + [t for t in tests if t not in hint]
    env = dict(os.environ, PYTHONPATH=f"{copy}{os.pathsep}{copy / 'maintainers'}")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
         *TIERS[tier], "--no-header", "-rfE", *order],
        cwd=copy, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    return out.returncode, out.stdout + out.stderr


def run_one(mutant: Mutant, copy: Path, timeout: float, tier="full") -> dict:
    """Apply one mutant to the copy, run the suite, put the text back."""
    target = copy / mutant.path
    original = target.read_text()
    if original.count(mutant.old) != 1:
        raise SystemExit(
            f"mutant {mutant.name!r}: its text is in {mutant.path} "
            f"{original.count(mutant.old)} times, not once: update the mutant"
        )
    target.write_text(original.replace(mutant.old, mutant.new))
    started = time.perf_counter()
    try:
        code, output = _suite(copy, mutant.hint, timeout, tier)
        killed = code != 0
        by = _first_failure(output) if killed else ""
        if code not in (0, 1):
            by = f"pytest exit {code}: {by}"
    except subprocess.TimeoutExpired:
        killed, by = False, f"(the suite ran past {timeout:.0f} s)"
    finally:
        target.write_text(original)
    return {
        "name": mutant.name,
        "kind": mutant.kind,
        "killed": killed,
        "by": by,
        "seconds": time.perf_counter() - started,
    }


def markdown(results, seconds, machine_text, tier="full") -> str:
    killed = sum(r["killed"] for r in results)
    flag = "" if tier == "full" else f" --tier {tier}"
    suite = {
        "full": "every tier but bigmem (`pytest -x -m 'not bigmem'`",
        "default": "the default tier (`pytest -x`",
    }[tier]
    out = [
        f"Measured on {machine_text}; written by `python maintainers/mutants.py "
        f"--tables docs/tables{flag}` in {seconds / 60:.0f} minutes. Each mutant "
        f"is one change to the package, run against {suite}, the most likely "
        "files first).\n",
        f"**{killed} of {len(results)} mutants killed.**\n",
        "| mutant | kind | killed by | seconds |",
        "|---|---|---|---:|",
    ]
    for r in results:
        by = f"`{r['by']}`" if r["killed"] else f"**survived** {r['by']}"
        out.append(f"| {r['name']} | {r['kind']} | {by} | {r['seconds']:.0f} |")
    return "\n".join(out) + "\n"


def main(argv=None):
    sys.path.insert(0, str(ROOT))
    from tools._common import machine_line, output_dir

    p = argparse.ArgumentParser(
        prog="python maintainers/mutants.py", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--only",
        metavar="NAME",
        action="append",
        help="the mutants whose name holds NAME (repeat for several)",
    )
    p.add_argument("--timeout", type=float, default=1200.0, help="seconds per mutant")
    p.add_argument(
        "--tables", type=output_dir, metavar="DIR", help="write mutants.md there"
    )
    p.add_argument(
        "--tier",
        choices=sorted(TIERS),
        default="full",
        help="the tests each mutant runs against (default: full, every tier "
        "but bigmem; mutants.md, or mutants-default.md for the default tier)",
    )
    p.add_argument("--list", action="store_true", help="list the mutants and stop")
    p.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip the unmutated run (which checks that the suite passes first)",
    )
    args = p.parse_args(argv)
    if not args.timeout > 0:
        p.error(f"--timeout must be a number of seconds above 0, got {args.timeout}")
    for name in args.only or ():
        if not any(name in m.name for m in MUTANTS):
            p.error(f"--only: no mutant's name holds {name!r} (--list lists them)")
    chosen = [
        m for m in MUTANTS if not args.only or any(n in m.name for n in args.only)
    ]
    if args.list:
        for m in MUTANTS:
            print(f"{m.kind:10} {m.name}")
        return []
    started = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory(prefix="jax-softplus-mutants-") as tmp:
        copy = Path(tmp) / "checkout"
        _copy(copy)
        if not args.no_baseline:
            # A suite that fails unmutated would kill every mutant.
            code, output = _suite(copy, tier=args.tier)
            if code != 0:
                sys.exit(f"the suite fails without a mutant:\n{output[-3000:]}")
            print(f"the suite passes unmutated ({time.perf_counter() - started:.0f} s)")
        for k, mutant in enumerate(chosen, 1):
            r = run_one(mutant, copy, args.timeout, args.tier)
            results.append(r)
            verdict = f"killed by {r['by']}" if r["killed"] else f"SURVIVED {r['by']}"
            took = f"{r['seconds']:.0f} s"
            print(f"[{k}/{len(chosen)}] {mutant.name}: {verdict} ({took})", flush=True)
    seconds = time.perf_counter() - started
    killed = sum(r["killed"] for r in results)
    print(f"\nscore: {killed} of {len(results)} killed, in {seconds / 60:.1f} min")
    if args.tables:
        os.makedirs(args.tables, exist_ok=True)
        name = "mutants.md" if args.tier == "full" else f"mutants-{args.tier}.md"
        with open(os.path.join(args.tables, name), "w") as f:
            f.write(markdown(results, seconds, machine_line(), args.tier))
    return results


if __name__ == "__main__":
    main()
