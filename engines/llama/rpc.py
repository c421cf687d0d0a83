"""llama.cpp's RPC backend through ctypes: RPC workers as devices of one model load.

The bindings expose ``llama_supports_rpc`` but not the ggml backend registry, so this module
calls ggml's C API from the libraries llama-cpp-python ships (``libggml.so``): the "RPC"
backend registry's ``ggml_backend_rpc_add_server`` (found through
``ggml_backend_reg_get_proc_address``, as llama.cpp's ``--rpc`` does) gives one registry per
endpoint, whose first device goes into ``llama_model_params.devices``.

The devices are not registered globally (``ggml_backend_register``): a registered RPC device
would be offered to every other model loaded in the process. llama.cpp's client aborts the
process when a worker does not answer, so only the split engine's own child process calls
this (`split_worker`).

Layer placement (``llama_model_base::load_tensors``): with ``n_gpu_layers = r + 1`` the last
``r`` layers and the output head go to the devices, in proportion to ``tensor_split``;
giving each worker its layer count (the last one +1 for the head) puts exactly those layers
there, since llama.cpp compares the same float quotients. With local GPU layers, this
machine's first GPU leads the device list with its count, and every layer is on a device.
"""
from __future__ import annotations

import ctypes
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from hypnos.engines.errors import EngineError

_ASSIGNED = re.compile(r"layer\s+(\d+) assigned to device (\S+?),")


@dataclass(frozen=True)
class RpcShare:
    """One worker's part of a split load: ``layers`` consecutive layers (the last share also
    the output head)."""
    endpoint: str
    layers: int


def ggml_library():
    """libggml of the installed llama-cpp-python, with the backend-registry calls the RPC
    split (and ``bench/cpu_repack.py``) use typed."""
    import llama_cpp
    lib = Path(llama_cpp.__file__).parent / "lib" / "libggml.so"
    if not lib.is_file():
        raise EngineError(f"llama-cpp-python ships no {lib.name} to reach the RPC backend")
    ggml = ctypes.CDLL(str(lib))
    ggml.ggml_backend_reg_by_name.argtypes = [ctypes.c_char_p]
    ggml.ggml_backend_reg_by_name.restype = ctypes.c_void_p
    ggml.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    ggml.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
    ggml.ggml_backend_reg_dev_count.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_reg_dev_count.restype = ctypes.c_size_t
    ggml.ggml_backend_reg_dev_get.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    ggml.ggml_backend_reg_dev_get.restype = ctypes.c_void_p
    ggml.ggml_backend_dev_name.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_dev_name.restype = ctypes.c_char_p
    ggml.ggml_backend_dev_count.argtypes = []
    ggml.ggml_backend_dev_count.restype = ctypes.c_size_t
    ggml.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    ggml.ggml_backend_dev_get.restype = ctypes.c_void_p
    ggml.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_dev_type.restype = ctypes.c_int
    return ggml


# enum ggml_backend_dev_type: CPU 0, GPU 1, IGPU 2 (an integrated GPU: Apple's Metal), ACCEL 3
_GPU_TYPES = (1, 2)


def _local_gpu(ggml):
    """This machine's first GPU device (RPC devices are never registered, so not listed)."""
    for i in range(ggml.ggml_backend_dev_count()):
        dev = ggml.ggml_backend_dev_get(i)
        if ggml.ggml_backend_dev_type(dev) in _GPU_TYPES:
            return dev
    return None


class RpcDevices:
    """The ``devices`` / ``tensor_split`` / ``n_gpu_layers`` of one split load. The ctypes
    arrays live as long as this object (keep it as long as the model)."""

    def __init__(self, ll, shares: list[RpcShare], local_gpu_layers: int = 0):
        if not ll.llama_supports_rpc():
            raise EngineError("this llama-cpp-python build has no RPC backend (build it with "
                              "CMAKE_ARGS=-DGGML_RPC=ON: ./run.sh does)")
        ggml = ggml_library()
        reg = ggml.ggml_backend_reg_by_name(b"RPC")
        add = ggml.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_add_server") \
            if reg else None
        if not add:
            raise EngineError("llama.cpp's RPC backend registry is missing")
        add_server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(add)
        devs, self.names, split = [], {}, []
        if local_gpu_layers > 0:
            gpu = _local_gpu(ggml)
            if gpu is None:
                raise EngineError("the placement puts layers on this machine's GPU, and "
                                  "llama.cpp lists none")
            devs.append(gpu)
            split.append(float(local_gpu_layers))
            self.names[ggml.ggml_backend_dev_name(gpu).decode()] = "local_gpu"
        for share in shares:
            server = add_server(share.endpoint.encode())
            if not server or ggml.ggml_backend_reg_dev_count(server) == 0:
                raise EngineError(f"RPC worker {share.endpoint} offers no device")
            dev = ggml.ggml_backend_reg_dev_get(server, 0)
            devs.append(dev)
            split.append(float(share.layers))
            self.names[ggml.ggml_backend_dev_name(dev).decode()] = share.endpoint
        self.shares = shares
        self.devices = (ctypes.c_void_p * (len(devs) + 1))(*devs, None)
        split[-1] += 1.0                                    # the output head
        self.tensor_split = (ctypes.c_float * ll.llama_max_devices())(*split)
        self.n_gpu_layers = local_gpu_layers + sum(s.layers for s in shares) + 1
        # How far the load is (0..1, per tensor uploaded): a hung worker stops it.
        self.progress = 0.0

        def on_progress(fraction: float, _user) -> bool:
            self.progress = fraction
            return True
        self._on_progress = ll.llama_progress_callback(on_progress)

    def apply(self, params) -> None:
        params.devices = ctypes.cast(self.devices, ctypes.c_void_p)
        params.tensor_split = self.tensor_split
        params.n_gpu_layers = self.n_gpu_layers
        params.split_mode = 1                               # LLAMA_SPLIT_MODE_LAYER
        params.progress_callback = self._on_progress

    def assigned(self, lines: list[str]) -> dict[str, int]:
        """Layers per endpoint, "local_gpu" (this machine's GPU) and "local" (its CPU), as
        llama.cpp logged their assignment."""
        counts: Counter[str] = Counter()
        for line in lines:
            m = _ASSIGNED.search(line)
            if m:
                counts[self.names.get(m.group(2), "local")] += 1
        return dict(counts)
