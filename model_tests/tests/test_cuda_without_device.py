"""A CUDA build of torch on a machine without a GPU runs the kernels, the kernel benchmark and the
defragmenter's figure on the CPU (issue 26, item 3).

Such a build answers ``torch.accelerator.current_accelerator()`` with ``cuda`` although no device
can be used; only ``check_available=True`` answers ``None`` there. The CPU build this suite runs
on is made to look like that build (``cuda_build_without_device``): any code that asked without
the flag would place a tensor on ``cuda`` and fail ("Torch not compiled with CUDA enabled").
And the advice to install the ``kv`` extra is given only where torch is really missing.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from pagedkv.model_tests.bench import defrag, kernels, runner
from pagedkv.model_tests.machines import torch_kv
from pagedkv.specs.types import ManagerConfig

FAKE_CUDA_BUILD = """
import torch

def current_accelerator(check_available=False):
    return None if check_available else torch.device("cuda")

torch.accelerator.current_accelerator = current_accelerator
torch.accelerator.is_available = lambda: False
"""
"""Makes this process's torch answer as a CUDA build without a driver does."""


@pytest.fixture
def cuda_build_without_device() -> Iterator[None]:
    saved = torch.accelerator.current_accelerator, torch.accelerator.is_available
    exec(FAKE_CUDA_BUILD, {})
    try:
        assert torch.accelerator.current_accelerator() == torch.device("cuda")
        yield
    finally:
        torch.accelerator.current_accelerator, torch.accelerator.is_available = saved


def test_the_fake_build_fails_code_that_asks_without_the_flag(
    cuda_build_without_device: None,
) -> None:
    """The fixture can fail a check: what the unflagged question answers cannot be used."""
    device = torch.accelerator.current_accelerator()
    assert device is not None
    with pytest.raises((AssertionError, RuntimeError)):
        torch.zeros(1, device=device)


def test_the_kernel_benchmark_times_the_cpu_alone(cuda_build_without_device: None) -> None:
    measured = kernels.measure(repetitions=1, threads=1, quick=True)
    assert measured["accelerator"] is None
    assert {row["device"] for row in measured["rows"]} <= {"cpu", "cpu->cpu"}, measured["rows"]
    assert measured["timer"] == "process CPU time"


def test_the_kernel_benchmark_program_prints_cpu_figures() -> None:
    """``python -m pagedkv.model_tests.bench.kernels --quick`` under the fake build, whole."""
    program = FAKE_CUDA_BUILD + (
        "import runpy, sys\n"
        "sys.argv = ['kernels', '--quick', '--reps', '1']\n"
        "runpy.run_module('pagedkv.model_tests.bench.kernels', run_name='__main__')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=False, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert '"accelerator": null' in done.stdout and '"device": "cpu"' in done.stdout


def test_the_defragmenter_figure_times_its_kernel_on_the_cpu(
    cuda_build_without_device: None,
) -> None:
    assert defrag.accelerator() == torch.device("cpu")
    rows = defrag.kernel_rows(8, [[(0, 5)], [(1, 6), (2, 7)]])
    assert [row[0] for row in rows] == ["smallest", "median", "largest"]


def test_the_kv_harness_keeps_the_gpu_pool_on_the_cpu(cuda_build_without_device: None) -> None:
    assert torch_kv.accelerator() == torch.device("cpu")
    side = torch_kv.TorchKV(ManagerConfig(block_size=2, num_gpu_blocks=4, num_cpu_blocks=2))
    assert {store.device.type for store in side.stores.values()} == {"cpu"}


def _section_after(
    monkeypatch: pytest.MonkeyPatch, section: Any, stderr: str
) -> tuple[list[str], list[str]]:
    """A bench section whose child failed with ``stderr``: (the reason shown, its notes)."""
    failed = subprocess.CompletedProcess([], 1, "", stderr)
    monkeypatch.setattr(subprocess, "run", lambda *_, **__: failed)
    options = SimpleNamespace(kernels=True, defrag=True, quick=True)
    found = section(SimpleNamespace(options=options))
    (table,) = found.tables
    return table.rows[0], table.notes


NO_DEVICE = [
    "RuntimeError: Found no NVIDIA driver on your system.",
    "torch.AcceleratorError: CUDA error: no CUDA-capable device is detected",
]
"""How a CUDA build of torch fails where no device can be used (it is installed)."""


@pytest.mark.parametrize("no_driver", NO_DEVICE)
@pytest.mark.parametrize("section", [runner.kernels_section, runner.defrag_section])
def test_the_install_advice_only_where_torch_is_missing(
    monkeypatch: pytest.MonkeyPatch, section: Any, no_driver: str
) -> None:
    reason, notes = _section_after(monkeypatch, section, f"Traceback ...\n{no_driver}\n")
    assert reason == [no_driver] and notes == []
    missing = "ModuleNotFoundError: No module named 'torch'"
    reason, notes = _section_after(monkeypatch, section, f"Traceback ...\n{missing}\n")
    assert reason == [missing] and any("pip install 'pagedkv[kv]'" in n for n in notes), notes
