"""Multi-device: JAX's SPMD partitioner runs the op where the data lies.

The checks run in a subprocess with 8 forced host devices, since the device
count is fixed when a process first initialises JAX.
"""

import json
from pathlib import Path

import pytest
from helpers import run_on_eight_devices

SCRIPT = Path(__file__).parent / "scripts" / "sharded_checks.py"


@pytest.fixture(scope="module")
def facts():
    stdout = run_on_eight_devices(str(SCRIPT), timeout=300)
    return json.loads(stdout.strip().splitlines()[-1])


def test_eight_devices(facts):
    assert facts["devices"] == 8


def test_output_keeps_input_sharding_without_collectives(facts):
    assert facts["out_sharding_matches"]
    assert facts["collectives"] == []
    assert facts["jit_matches_unsharded"]
    assert facts["forward_sharding_matches"]
    assert facts["forward_collectives"] == []


def test_eager_calls_keep_the_sharding(facts):
    assert facts["eager_sharding_matches"]
    assert facts["eager_matches_jit"]


def test_shard_map(facts):
    assert facts["shard_map_matches"]


def test_shard_map_with_replicated_operands(facts):
    # Values, forward and reverse mode, against the same bodies in jax.nn ops.
    cases = facts["varying_cases"]
    assert len(cases) == 11
    assert {name: res for name, res in cases.items() if res != "ok"} == {}


def test_direct_bind_with_unmatched_varying_axes_is_refused(facts):
    message = facts["direct_bind_error"]
    assert message is not None
    assert "src {}" in message and "diff_dst {'d'}" in message
    assert "jax.lax.pcast" in message


def test_donating_a_sharded_array(facts):
    assert facts["donated_deleted"]
    assert facts["donated_out_sharding_matches"]


def test_data_parallel_training_reduces_the_loss(facts):
    first, last = facts["losses"]
    assert last < 0.5 * first
