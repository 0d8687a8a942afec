"""Every example and tool, given each option's invalid or edge values (0,
negative, not a number, an empty or unknown list item, more processes
than the batch divides by), answers with a usage error before doing any
work: exit 2, its reason on one line, never a traceback. (Their runs with
valid options are tested beside their own code: test_examples, test_bench,
test_accuracy, ...) And each --help description is whole.

The cases of one script run in one subprocess (JAX imported once), each as
the script itself would run (`runpy`, `__main__`).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Each script in a subprocess of its own: the tools tier.
pytestmark = pytest.mark.tools

ROOT = Path(__file__).resolve().parents[1]

# Values no count, size or rate takes.
COUNTS = ("0", "-1", "x", "1.5")
SIZES = ("", "0", "-1K", "2Q", ",")
LISTS = ("", "bogus")
# Output paths no tool can write, found before any work: a folder given as
# a file, a file given as a folder, and a path through a file.
OUT_FILES = ("docs", "", "README.md/out.json")
OUT_DIRS = ("README.md", "README.md/tables")
# Inputs that are not there, and not JSON.
IN_JSON = ("no/such/run.json", "README.md")

# A committed GPU run, which --render reads.
GPU_RUN = "benchmarks/results/h200-2026-12-04"

# script (a path, or a module to run with -m) -> (the values to try per
# option, cases of several options).
SCRIPTS = {
    "examples/multiprocess.py": (
        {"--launch": COUNTS, "--devices": COUNTS, "--num-processes": COUNTS},
        [
            # 64 rows over 3 devices: IndivisibleError before the check.
            ["--launch", "3", "--devices", "1"],
            [
                "--coordinator",
                "127.0.0.1:1",
                "--num-processes",
                "2",
                "--process-id",
                "2",
            ],
            [
                "--coordinator",
                "127.0.0.1:1",
                "--num-processes",
                "2",
                "--process-id",
                "-1",
            ],
            ["--coordinator", "127.0.0.1:1"],
            # Not host:port, port 0 (no process can listen there for the
            # others), a port past 65535.
            *(
                ["--coordinator", c, "--num-processes", "2", "--process-id", "0"]
                for c in ("junk", "localhost:0", "localhost:99999", ":1234")
            ),
        ],
    ),
    "examples/train_mlp.py": (
        {"--epochs": COUNTS, "--beta": ("0", "nan", "inf", "x", "1e39", "1e-40")},
        [],
    ),
    "examples/quickstart.py": ({}, [["--bogus"]]),
    "examples/per_example_grads.py": ({}, [["--bogus"]]),
    "examples/sharded.py": ({}, [["--bogus"]]),
    "examples/shard_map_beta.py": ({}, [["--bogus"]]),
    "tools.bench": (
        {
            "--sizes": SIZES,
            "--dtypes": LISTS + ("f64",),
            "--betas": LISTS + ("0", "nan", "1e39"),
            "--repeats": COUNTS,
            "--scaling": SIZES[1:],
            "--derivatives": SIZES[1:],
            "--float64": SIZES[1:],
            "--highest": SIZES[1:],
            "--json": OUT_FILES,
            "--plot": OUT_FILES + ("x.txt", "x"),
            "--markdown": OUT_FILES,
            "--tables": OUT_DIRS,
        },
        # Nothing to measure.
        [["--sizes", "none"]],
    ),
    "tools.accuracy": (
        {
            "-n": COUNTS,
            "--n64": COUNTS,
            "--nd": COUNTS,
            "--dtypes": LISTS,
            "--betas": LISTS + ("0", "nan"),
            "--platforms": LISTS,
            "--json": OUT_FILES,
            "--plot": OUT_FILES + ("x.txt", "x"),
            "--markdown": OUT_FILES,
            "--tables": OUT_DIRS,
        },
        [],
    ),
    "tools.specials": ({"--tables": OUT_DIRS}, [["--bogus"]]),
    "maintainers/derivative_search.py": (
        {
            "--budget": COUNTS,
            "-n": COUNTS,
            "--platforms": LISTS,
            "--seed": ("-1", "x"),
            "--json": OUT_FILES,
            "--tables": OUT_DIRS,
        },
        [],
    ),
    "maintainers/exhaustive.py": (
        {
            "--stride": COUNTS,
            "--random-betas": COUNTS,
            "--accuracy": ("low",),
            "--near": ("-1", "x"),
            "--platform": ("gpu", ""),
            "--offset": ("-1", "x"),
            "--tables": OUT_DIRS,
            "--render": IN_JSON,
        },
        # Another platform's evaluation and a part of a run are HIGHEST's
        # only, and a part is below the stride.
        [
            ["--platform", "tpu"],
            ["--offset", "1", "--stride", "2"],
            ["--accuracy", "highest", "--stride", "8", "--offset", "8"],
            # JSON, but no run's.
            ["--render", "docs/tables/bench.json", "--tables", "/tmp"],
            ["--render", "docs/tables/bench.json", "--tables", "/tmp"]
            + ["--accuracy", "highest"],
        ],
    ),
    "maintainers/roofline.py": (
        {
            "--dtypes": LISTS,
            "--beta": ("0", "nan", "x"),
            "--sizes": SIZES,
            "--tables": OUT_DIRS,
        },
        [],
    ),
    "maintainers/mutants.py": (
        {
            "--timeout": ("0", "-1", "x", "nan"),
            "--only": ("no such mutant",),
            "--tables": OUT_DIRS,
        },
        [],
    ),
    "maintainers/pytorch_samples.py": ({"--draws": COUNTS, "--tables": OUT_DIRS}, []),
    "maintainers/fit.py": ({}, [["_NO_SUCH_CONSTANT"]]),
    "maintainers/timed.py": (
        {},
        [
            [],
            ["--tables", "/tmp"],
            ["--tables", "/tmp", "--"],
            ["--tables", "/tmp", "--", "no_such_command"],
            *(["--tables", d, "--", "true"] for d in OUT_DIRS),
        ],
    ),
    "benchmarks/gpu_bench.py": (
        {
            "--size": COUNTS,
            "--dtypes": LISTS,
            "--iters": COUNTS,
            "--rounds": COUNTS,
            "--step-rounds": COUNTS,
            "--json": OUT_FILES,
            "--hlo": OUT_DIRS,
            "--render": IN_JSON,
        },
        [
            ["--render", "docs/tables/bench.json"],  # no gpu.txt beside it
            ["--render", f"{GPU_RUN}/gpu_bench.json"],  # nowhere to write
            ["--render", f"{GPU_RUN}/gpu_bench.json", "--tables", "README.md"],
        ],
    ),
    "benchmarks/dp_deadlock_repro.py": (
        {"--trials": COUNTS, "--timeout": ("0", "-1", "x")},
        [],
    ),
}

# Each case runs as the script (`__main__`); one still working after
# `LIMIT` seconds took its options and is stopped there.
LIMIT = 20
DRIVER = r"""
import contextlib, io, json, runpy, signal, sys, traceback
script, cases, limit = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])

class Running(BaseException):
    pass

def stop(*_):
    raise Running()

signal.signal(signal.SIGALRM, stop)
out = []
for argv in cases:
    err, std = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
        signal.alarm(limit)
        try:
            if script.endswith(".py"):
                sys.argv = [script, *argv]
                runpy.run_path(script, run_name="__main__")
            else:
                sys.argv = [script, *argv]
                runpy.run_module(script, run_name="__main__", alter_sys=True)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except Running:
            code = f"still running after {limit} s"
        except BaseException:
            code = "traceback"
            err.write(traceback.format_exc())
        finally:
            signal.alarm(0)
    out.append(
        {"argv": argv, "code": code, "stderr": err.getvalue(), "stdout": std.getvalue()}
    )
print(json.dumps(out))
"""


def _cases(script):
    values, combined = SCRIPTS[script]
    return [[opt, v] for opt, vs in values.items() for v in vs] + combined


def _run(script, cases, timeout=600):
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "examples")])
    )
    env["JAX_PLATFORMS"] = "cpu"
    target = str(ROOT / script) if script.endswith(".py") else script
    result = subprocess.run(
        [sys.executable, "-c", DRIVER, target, json.dumps(cases), str(LIMIT)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@functools.cache
def _results(script):
    """The cases' results, and --help's, from one subprocess per script."""
    *cases, help_ = _run(script, _cases(script) + [["--help"]])
    return cases, help_


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_each_invalid_option_is_a_one_line_usage_error(script):
    bad = []
    for case in _results(script)[0]:
        lines = [line for line in case["stderr"].splitlines() if line.strip()]
        errors = [line for line in lines if ": error: " in line]
        ok = (
            case["code"] == 2
            and "Traceback" not in case["stderr"]
            and len(errors) == 1
            and lines[-1] == errors[0]
        )
        if not ok:
            bad.append(f"{case['argv']}: exit {case['code']}\n{case['stderr'][-800:]}")
    assert not bad, "\n\n".join(bad)


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_each_help_description_is_whole(script):
    help_ = _results(script)[1]
    assert help_["code"] == 0, help_["stderr"]
    paragraphs = help_["stdout"].split("\n\n")
    # usage, then the description (unless the parser has none), then options.
    assert len(paragraphs) > 2, help_["stdout"]
    text = " ".join(paragraphs[1].split())
    assert not text.startswith(("options:", "positional arguments:")), text
    # A whole sentence or more: it ends as one does, not mid-phrase.
    assert text.endswith((".", ".)", ".`", ":")), text


def _shell(*argv, env=None):
    return subprocess.run(
        ["bash", "benchmarks/gpu.sh", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=dict(os.environ, **(env or {})),
    )


def test_the_gpu_script_answers_help_and_refuses_bad_arguments_in_one_line():
    out = _shell("--help")
    assert out.returncode == 0 and out.stdout.startswith(
        "usage: bash benchmarks/gpu.sh"
    )
    for argv in (["--bogus"], ["a", "b"]):
        out = _shell(*argv)
        assert out.returncode == 2, argv
        last = out.stderr.strip().splitlines()[-1]
        assert last.startswith("gpu.sh: error: "), out.stderr
    if shutil.which("nvidia-smi") is None:
        # No GPU: a one-line error, not the suite started on the CPU.
        out = _shell(str(ROOT / ".no-such-out"))
        assert out.returncode == 2 and "no GPU here" in out.stderr
        assert not (ROOT / ".no-such-out").exists()
