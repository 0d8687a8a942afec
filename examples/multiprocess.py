"""Data-parallel training over several JAX processes (multi-host JAX).

Each process owns some devices and its shard of the batch;
`jax.distributed.initialize` joins them into one runtime, and one global
mesh spans every device. The step uses `softplus` (its gradient binds the
SoftPlusBackward primitive) and `softplus_backward_inplace` on a global
array sharded over the processes; XLA's collectives (gloo, on CPUs)
all-reduce the gradients.

On one machine, launch two processes of two CPU devices each (what it does
when run with no arguments, or with `--quick`):

    python examples/multiprocess.py --launch 2

On a cluster, start one process per host with the coordinator's address,
the process count and each process's id:

    python examples/multiprocess.py --coordinator HOST:PORT \\
        --num-processes N --process-id I

`--launch 1 --devices 4` runs the same step in one process on 4 devices:
the result is the same, bit for bit. Each step is blocked on before the
next (a 2-core host can deadlock with several collective steps in flight,
see the sharp-bits page). Prints one JSON line from process 0.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys

STEPS = 5
SIZES = (16, 32, 4)
GLOBAL_BATCH = 64


def coordinator_address(text: str) -> str:
    """An argparse type: HOST:PORT with a port a coordinator can listen on."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    if not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(
            f"port {port} of {text!r} is not one a coordinator can listen on "
            "(1 to 65535)"
        )
    return text


# Set by `launch` for its processes: process 0 then prints its result as
# JSON for the launcher, not the summary a person reads.
_JSON = "JAX_SOFTPLUS_MULTIPROCESS_JSON"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(processes: int, devices: int, timeout: float = 120.0) -> dict:
    """Start `processes` copies of this script on localhost; process 0's
    result. Each gets `devices` CPU devices and a shared free port."""
    port = _free_port()
    env = dict(os.environ, **{_JSON: "1"})
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}"
    ).strip()
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [os.path.dirname(here), env.get("PYTHONPATH")])
    )
    args = [sys.executable, os.path.abspath(__file__)]
    procs = [
        subprocess.Popen(
            [
                *args,
                "--coordinator",
                f"127.0.0.1:{port}",
                "--num-processes",
                str(processes),
                "--process-id",
                str(i),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(processes)
    ]
    outputs = []
    try:
        for i, p in enumerate(procs):
            out, err = p.communicate(timeout=timeout)
            if p.returncode != 0:
                how = (
                    f"was killed by signal {-p.returncode}"
                    if p.returncode < 0
                    else f"exited with {p.returncode}"
                )
                raise RuntimeError(
                    f"process {i} of {processes} {how}; its last output:\n"
                    f"{(err or out or '(none)')[-2000:]}"
                )
            outputs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return json.loads(outputs[0].strip().splitlines()[-1])


def run(coordinator: str, num_processes: int, process_id: int) -> dict:
    """One process's part of the training run (after XLA_FLAGS are set)."""
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator, num_processes, process_id)

    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jax_softplus import softplus, softplus_backward_inplace

    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    batch = NamedSharding(mesh, P("data"))
    replicated = NamedSharding(mesh, P())

    # The same global data and parameters everywhere; each process passes
    # only the rows its devices hold.
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((GLOBAL_BATCH, SIZES[0])).astype(np.float32)
    ys = rng.standard_normal((GLOBAL_BATCH, SIZES[-1])).astype(np.float32)
    params = [
        (
            (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32),
            np.zeros(b, np.float32),
        )
        for a, b in zip(SIZES[:-1], SIZES[1:], strict=True)
    ]
    params = jax.tree.map(lambda a: jax.device_put(a, replicated), params)
    rows = GLOBAL_BATCH // jax.process_count()
    mine = slice(jax.process_index() * rows, (jax.process_index() + 1) * rows)

    def global_batch(a):
        return jax.make_array_from_process_local_data(batch, a[mine], a.shape)

    x, y = global_batch(xs), global_batch(ys)

    def loss_fn(params, x, y):
        h = x
        for w, b in params[:-1]:
            h = softplus(h @ w + b[None, :], 1.5)
        w, b = params[-1]
        return jnp.mean((h @ w + b[None, :] - y) ** 2)

    @jax.jit
    def train_step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return jax.tree.map(lambda p, g: p - 0.05 * g, params, grads), loss

    losses = []
    for _ in range(STEPS):
        params, loss = train_step(params, x, y)
        losses.append(float(jax.block_until_ready(loss)))

    # The backward op in place, on the global array: diff_dst is donated.
    g = global_batch(np.ones_like(xs))
    out = jax.block_until_ready(softplus_backward_inplace(x, g, 1.5))
    gather = jax.jit(lambda a: a, out_shardings=replicated)
    result = {
        "processes": jax.process_count(),
        "devices": jax.device_count(),
        "losses": losses,
        "params": [
            np.asarray(gather(a)).view(np.uint32).tolist()
            for a in jax.tree.leaves(params)
        ],
        "inplace": np.asarray(gather(out)).view(np.uint32).tolist(),
        "donated": bool(g.is_deleted()),
    }
    jax.distributed.shutdown()
    return result


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="More devices: --devices N host CPU devices per process, and "
        "--launch K local processes (or --coordinator, --num-processes and "
        "--process-id for processes of your own, one per host).",
    )
    p.add_argument("--launch", type=int, metavar="N", help="start N local processes")
    p.add_argument("--devices", type=int, default=2, help="CPU devices per process")
    p.add_argument(
        "--coordinator",
        metavar="HOST:PORT",
        type=coordinator_address,
        help="the coordinator's address, for processes you start yourself",
    )
    p.add_argument(
        "--num-processes", type=int, metavar="N", help="how many processes in all"
    )
    p.add_argument(
        "--process-id", type=int, metavar="I", help="this process's index, 0 to N-1"
    )
    p.add_argument(
        "--quick", action="store_true", help="the local run (as the other examples)"
    )
    args = p.parse_args(argv)
    for name in ("launch", "devices", "num_processes"):
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if args.process_id is not None and args.process_id < 0:
        p.error(f"--process-id must be at least 0, got {args.process_id}")
    cluster = (args.coordinator, args.num_processes, args.process_id)
    if any(v is not None for v in cluster) and not all(v is not None for v in cluster):
        p.error("--coordinator, --num-processes and --process-id go together")
    if args.coordinator is not None and args.process_id >= args.num_processes:
        p.error(
            f"--process-id {args.process_id} is not below --num-processes "
            f"{args.num_processes}"
        )
    if args.launch is None and args.coordinator is None:
        args.launch = 2  # run bare (or --quick): the local two-process run
    if args.launch and GLOBAL_BATCH % (args.launch * args.devices):
        p.error(
            f"the batch of {GLOBAL_BATCH} rows does not split evenly over "
            f"{args.launch} processes of {args.devices} devices; choose "
            "--launch and --devices whose product divides it (1, 2, 4, ..., 64)"
        )
    if args.launch:
        result = launch(args.launch, args.devices)
        losses = ", ".join(f"{v:.4f}" for v in result["losses"])
        print(
            f"{result['processes']} processes, {result['devices']} devices in all; "
            f"loss per step: {losses}"
        )
        return result
    result = run(args.coordinator, args.num_processes, args.process_id)
    if result and args.process_id == 0:
        if os.environ.get(_JSON):
            print(json.dumps(result))
        else:
            losses = ", ".join(f"{v:.4f}" for v in result["losses"])
            print(
                f"process 0 of {result['processes']}, {result['devices']} devices "
                f"in all; loss per step: {losses}"
            )
    return result


if __name__ == "__main__":
    main()
