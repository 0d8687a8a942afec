"""Multi-device: JAX's SPMD partitioner runs the op where the data lies.

The checks run in a subprocess with 8 forced host devices, since the device
count is fixed when a process first initialises JAX.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "scripts" / "sharded_checks.py"


@pytest.fixture(scope="module")
def facts():
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()
    result = subprocess.run(
        [sys.executable, str(SCRIPT)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_eight_devices(facts):
    assert facts["devices"] == 8


def test_output_keeps_input_sharding_without_collectives(facts):
    assert facts["out_sharding_matches"]
    assert facts["collectives"] == []
    assert facts["jit_matches_unsharded"]
    assert facts["forward_sharding_matches"]
    assert facts["forward_collectives"] == []


def test_shard_map(facts):
    assert facts["shard_map_matches"]


def test_donating_a_sharded_array(facts):
    assert facts["donated_deleted"]
    assert facts["donated_out_sharding_matches"]


def test_data_parallel_training_reduces_the_loss(facts):
    first, last = facts["losses"]
    assert last < 0.5 * first
