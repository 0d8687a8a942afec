"""The examples run, in quick mode, so that they cannot rot."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import jax
import pytest
from helpers import run_on_eight_devices

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(autouse=True)
def standard_promotion():
    # Optax mixes int32 step counts with Python floats, which the suite's
    # strict promotion (conftest.py) rejects; the examples use JAX's default.
    with jax.numpy_dtype_promotion("standard"):
        yield


def _load(name):
    # As when run as a script: the examples' own helpers import from beside it.
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quickstart():
    out = _load("quickstart").main(quick=True)
    assert out["y"].shape == (8,) and out["per_example"].shape == (3, 8)


@pytest.mark.tools
def test_per_example_grads():
    pytest.importorskip("optax")
    per_example, learned, true_betas = _load("per_example_grads").main(quick=True)
    assert per_example.shape[0] == learned.shape[0]
    assert float(abs(learned - true_betas).max()) < 1e-3


@pytest.mark.tools
def test_train_mlp_learns_digits(capsys):
    pytest.importorskip("flax")
    pytest.importorskip("optax")
    pytest.importorskip("sklearn")
    acc = _load("train_mlp").main(quick=True)
    assert acc > 0.8  # 3 epochs; the full 40-epoch run reaches 97%
    # Not on a terminal (captured): one line per epoch, no progress bar.
    out = capsys.readouterr()
    assert [line.split(":")[0] for line in out.out.splitlines()[:3]] == [
        "epoch 1/3",
        "epoch 2/3",
        "epoch 3/3",
    ]
    assert "training" not in out.err


@pytest.mark.multidevice
def test_sharded_on_eight_host_devices():
    stdout = run_on_eight_devices(str(EXAMPLES / "sharded.py"), "--quick", timeout=120)
    assert "8 devices" in stdout
    first, last = (float(v) for v in stdout.split("loss ")[1].split()[0:3:2])
    assert last < first


@pytest.mark.multidevice
def test_shard_map_with_a_learnable_beta():
    stdout = run_on_eight_devices(
        str(EXAMPLES / "shard_map_beta.py"), "--quick", timeout=120
    )
    gap = float(stdout.split("max |diff| ")[1].split()[0])
    assert gap < 1e-6  # the first step, against jax.nn.softplus
    losses, betas = stdout.split("loss ")[1].split(", beta ")
    first, last = (float(v) for v in losses.split(" -> "))
    assert last < 0.5 * first
    assert float(betas.split(" -> ")[1]) != 1.0  # beta learned


@pytest.mark.tools
@pytest.mark.parametrize(
    "name", sorted(p.stem for p in EXAMPLES.glob("*.py") if not p.stem.startswith("_"))
)
def test_every_examples_help_says_how_to_run_it_on_more_devices(name):
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "More devices" in " ".join(out.split())


@pytest.mark.multidevice
def test_a_sharded_example_run_bare_asks_for_host_devices_and_says_so(monkeypatch):
    # Run bare on a CPU it printed "1 devices": it now asks XLA for 8 before
    # JAX starts (a count in XLA_FLAGS wins) and says so.
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    root = str(EXAMPLES.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "sharded.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env=env,
    ).stdout
    assert "asked XLA for 8" in out and "8 devices" in out


@pytest.mark.tools
@pytest.mark.parametrize(
    "name, missing",
    [("train_mlp", "optax"), ("train_mlp", "flax"), ("per_example_grads", "optax")],
)
def test_a_missing_package_names_the_extra_that_installs_it(name, missing):
    # Without the examples' packages, train_mlp.py died with a bare
    # ModuleNotFoundError: No module named 'optax'.
    blocker = (
        "import sys, runpy; "
        f"sys.modules[{missing!r}] = None; "
        f"sys.argv = [{str(EXAMPLES / (name + '.py'))!r}, '--quick']; "
        f"runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    env_path = str(EXAMPLES)
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {env_path!r}); {blocker}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1, out.stderr
    assert f"needs {missing}" in out.stderr
    assert 'pip install -e ".[examples]"' in out.stderr
    assert "Traceback" not in out.stderr
