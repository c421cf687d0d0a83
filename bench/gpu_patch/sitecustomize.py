"""On PYTHONPATH only for a GPU lease (bench/gpu_lease.sh): applies bench/gpu_probe.py's
patches named in HYPNOS_GPU_PATCHES (comma-separated) in every Python process, the checks'
servers included, so the checks can run with the cure the probe found."""
import os
import sys

_patches = [p for p in os.environ.get("HYPNOS_GPU_PATCHES", "").split(",") if p]
if _patches:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        import gpu_probe
        gpu_probe.apply(_patches)
    except Exception as exc:  # noqa: BLE001 - a patch must not stop the interpreter
        print(f"gpu_patch: {exc}", file=sys.stderr)
