"""Multi-process JAX: two processes on localhost (CPU devices, gloo
collectives) train with the op and run it in place on a global array,
bit for bit as one process on the same four devices does.

Runs `examples/multiprocess.py`, which launches the processes on a free
port with a bounded wait and blocks on each step.
"""

import importlib.util
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "multiprocess.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("multiprocess", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.multidevice
def test_two_processes_match_one_bit_for_bit(example):
    two = example.launch(2, devices=2, timeout=120)
    one = example.launch(1, devices=4, timeout=120)
    assert (two["processes"], two["devices"]) == (2, 4)
    assert (one["processes"], one["devices"]) == (1, 4)
    assert two["losses"] == one["losses"]
    assert two["losses"][-1] < two["losses"][0]  # it trains
    assert two["params"] == one["params"]
    assert two["inplace"] == one["inplace"]
    assert two["donated"] and one["donated"]


@pytest.mark.parametrize("argv", [[], ["--quick"]], ids=["bare", "quick"])
def test_run_bare_or_quick_it_does_the_local_two_process_run(
    example, argv, monkeypatch
):
    calls = []

    def launch(processes, devices):
        calls.append((processes, devices))
        return {"processes": processes, "devices": devices, "losses": [1.0]}

    monkeypatch.setattr(example, "launch", launch)
    example.main(argv)
    assert calls == [(2, 2)]


def test_a_partial_cluster_address_is_a_usage_error(example):
    with pytest.raises(SystemExit) as exit_info:
        example.main(["--coordinator", "localhost:1234"])
    assert exit_info.value.code == 2
