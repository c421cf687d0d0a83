"""bench/gpu_probe.py's pure parts: which variant the checks run with, and the patches the
lease's sitecustomize applies. The probe itself needs a GPU build (bench/README.md)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import gpu_probe  # noqa: E402


def test_no_cure_is_needed_when_the_unpatched_load_runs():
    assert gpu_probe.choose_cure({"as-is": True, "stdcxx": True}) == "as-is"
    assert gpu_probe.choose_cure({}) == "as-is"


def test_the_first_cure_that_ran_is_chosen_and_the_controls_never_are():
    ran = {"as-is": False, "direct": True, "gpu0": True, "stdcxx": False, "sysinfo": True,
           "no-preload": True}
    assert gpu_probe.choose_cure(ran) == "sysinfo"
    assert gpu_probe.choose_cure({"as-is": False, "direct": True, "gpu0": True}) == "none"


def test_every_cure_is_a_variant_and_its_patches_apply(monkeypatch):
    assert set(gpu_probe.CURES) <= set(gpu_probe.VARIANTS)
    from hypnos.engines import devices
    monkeypatch.setattr(devices, "preload_cuda_runtime", devices.preload_cuda_runtime)
    gpu_probe.apply(gpu_probe.VARIANTS["no-preload"])
    assert devices.preload_cuda_runtime() == []
