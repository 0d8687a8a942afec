"""Run a command and record how long it took: `python maintainers/timed.py
--tables docs/tables -- pytest -q`.

The docs quote how long the test suite and the tools take, and at what
peak memory; those figures come from here. The command runs as a child;
its wall time, the largest resident set of its processes (the child's or
one of its own children's, whichever was largest) and the machine go into
`timings.md` under DIR, one row per command (a new run replaces the
command's row). `tests/test_provenance.py` holds the docs to the rows.
"""

from __future__ import annotations

import argparse
import datetime
import resource
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

HEADER = (
    "Measured on the machine each row names, by `python maintainers/timed.py`: "
    "each command's wall time and the largest resident set of its processes "
    "(a row whose peak memory says 'not measured' was timed otherwise: "
    "by `time`, or by pytest's own clock).\n\n"
    "| command | minutes | peak memory | machine | date |\n"
    "|---|---:|---:|---|---|\n"
)


def _rows(path: Path) -> dict:
    rows = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.startswith("| `"):
                rows[line.split("|")[1].strip()] = line
    return rows


def record(directory, command, minutes, peak_gib, machine, date=None):
    """Write (or replace) the command's row of DIR/timings.md (`peak_gib`
    None: a run timed otherwise, by `time` or pytest, whose peak was not
    read)."""
    path = Path(directory) / "timings.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = _rows(path)
    name = f"`{command}`"
    date = date or datetime.date.today().isoformat()
    peak = "not measured" if peak_gib is None else f"{peak_gib:.1f} GiB"
    rows[name] = f"| {name} | {minutes:.1f} | {peak} | {machine} | {date} |"
    path.write_text(HEADER + "\n".join(rows[k] for k in sorted(rows)) + "\n")
    return path


def main(argv=None):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tools._common import machine_line, output_dir

    p = argparse.ArgumentParser(
        prog="python maintainers/timed.py", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--tables",
        type=output_dir,
        metavar="DIR",
        required=True,
        help="where timings.md is",
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("give the command to time after --")
    if shutil.which(command[0]) is None:
        p.error(f"no such command: {command[0]!r} (not a file, nor on PATH)")
    started = time.perf_counter()
    code = subprocess.run(command, check=False).returncode
    minutes = (time.perf_counter() - started) / 60
    # ru_maxrss of the children is in KiB on Linux: the largest of them.
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    if code != 0:
        print(f"timed.py: the command exited with {code}; nothing recorded")
        return code
    path = record(args.tables, shlex.join(command), minutes, peak, machine_line())
    print(f"{minutes:.1f} min, peak {peak:.1f} GiB: recorded in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
