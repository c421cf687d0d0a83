"""Image generation and edits with stable-diffusion.cpp (engine kind ``ggml_diffusion``),
through stable-diffusion-cpp-python.

Files: ``weights_path`` is the model. Alone it is a whole checkpoint (SD 1.x/2.x/XL, SD-Turbo:
UNet, text encoders and VAE in one GGUF or safetensors file). With ``text_encoder_path`` it
is a standalone diffusion model (FLUX.2 klein) whose text encoder is that LLM file, and
``aux_path`` is the VAE. Every file is checked to be a GGUF, safetensors or PyTorch
checkpoint before the library sees it, so a wrong file is a clear error, not a crash.

The library runs in a child process (`sd_worker`): stable-diffusion.cpp can crash (segfault,
floating-point exception) on a file that is not a complete model it supports, and that must
not take the server with it. Without the library ``load`` raises
``EngineUnavailable("ggml_diffusion", "images")``. Images are made one per library call with
seed + index, so any image can be remade alone from its reported seed; ``cancel`` is checked
between images. The child's memory is not in the server's RSS.
"""
from __future__ import annotations

import importlib.util
import json
import multiprocessing
import os
import signal
import struct
import threading
import time
from pathlib import Path

from hypnos.engines import sd_worker
from hypnos.engines.errors import EngineError, EngineUnavailable
from hypnos.engines.records import GeneratedImage, ImageRequest, LoadReport, LoadSpec

MAX_SAFETENSORS_HEADER = 100 * 2**20


def check_model_file(path: Path | None, role: str = "weights") -> str:
    """The file's format (gguf | safetensors | checkpoint); EngineError naming the file when
    it is missing or none of them."""
    if path is None or not path.is_file():
        raise EngineError(f"the diffusion {role} file is missing: {path}")
    with open(path, "rb") as f:
        head = f.read(8)
        if head[:4] == b"GGUF":
            return "gguf"
        if head[:2] == b"PK":
            return "checkpoint"        # torch.save's zip format (.ckpt / .pt)
        if len(head) == 8:
            size = struct.unpack("<Q", head)[0]
            if 2 <= size <= MAX_SAFETENSORS_HEADER:
                try:
                    header = json.loads(f.read(size))
                except (UnicodeDecodeError, ValueError):
                    header = None
                if isinstance(header, dict):
                    return "safetensors"
    raise EngineError(f"{path.name} is not a GGUF, safetensors or checkpoint file, so "
                      f"stable-diffusion.cpp cannot load it as the {role}")


class DiffusionGenerator:
    """``ImageGenerator`` over one stable-diffusion.cpp context that lives in a child process
    (`sd_worker`), so a library crash on a bad file is an EngineError, not the server's end.
    Calls are serialised: the context runs one generation at a time."""

    kind = "ggml_diffusion"

    def __init__(self) -> None:
        self._proc = None
        self._conn = None
        self._name = ""
        self._lock = threading.Lock()

    def load(self, spec: LoadSpec) -> LoadReport:
        """Check the files, start the worker, wait until it built the context. Blocks
        (seconds to minutes: the weights are read in full)."""
        t0 = time.perf_counter()
        encoder = spec.files.get("text_encoder_path")
        vae = spec.files.get("aux_path")
        check_model_file(spec.weights_path)
        if encoder is not None:
            check_model_file(encoder, "text encoder")
        if vae is not None:
            check_model_file(vae, "VAE")
        if importlib.util.find_spec("stable_diffusion_cpp") is None:
            raise EngineUnavailable("ggml_diffusion", "images")
        paths = ({"diffusion_model_path": str(spec.weights_path), "llm_path": str(encoder)}
                 if encoder is not None else {"model_path": str(spec.weights_path)})
        if vae is not None:
            paths["vae_path"] = str(vae)
        self.unload()
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=sd_worker.main, daemon=True, name=f"sd-{spec.model_id}",
                           args=(child, paths, spec.threads or len(os.sched_getaffinity(0))))
        proc.start()
        child.close()
        with self._lock:
            self._proc, self._conn, self._name = proc, parent, spec.weights_path.name
            try:
                reply = self._receive("loading")
            except EngineError:
                self._stop()
                raise
            if reply[0] != "ready":
                self._stop()
                raise EngineError(f"{spec.model_id}: stable-diffusion.cpp refused the model: "
                                  f"{reply[1]}")
        ms = (time.perf_counter() - t0) * 1e3
        return LoadReport(load_mode="read", weights_ms=ms, total_ms=ms)

    def unload(self) -> None:
        with self._lock:
            self._stop()

    def generate(self, req: ImageRequest, cancel: threading.Event) -> list[GeneratedImage]:
        with self._lock:
            if self._proc is None:
                raise EngineError("model not loaded")
            out: list[GeneratedImage] = []
            for i in range(req.n):
                if cancel.is_set():
                    break
                kwargs = {"prompt": req.prompt, "negative_prompt": req.negative_prompt,
                          "width": req.width, "height": req.height,
                          "sample_steps": req.steps, "cfg_scale": req.cfg_scale,
                          "seed": req.seed + i, "batch_count": 1,
                          "references": list(req.references)}
                if req.sampler:
                    kwargs["sample_method"] = req.sampler
                self._conn.send(("generate", kwargs))
                reply = self._receive("generating")
                if reply[0] != "image":
                    raise EngineError(f"stable-diffusion.cpp failed: {reply[1]}")
                out.append(GeneratedImage(reply[1], req.seed + i))
        return out

    def _receive(self, doing: str) -> tuple:
        """The worker's next message; EngineError when it died instead (the worker is then
        gone and the engine unloaded). Caller holds the lock."""
        while not self._conn.poll(0.5):
            if not self._proc.is_alive():
                break
        try:
            if self._conn.poll():
                return self._conn.recv()
        except (EOFError, OSError):
            pass                        # the worker died: its end of the pipe closed
        self._proc.join(5)
        code = self._proc.exitcode
        self._stop()
        how = (f"signal {signal.Signals(-code).name}" if code is not None and code < 0
               else f"exit code {code}")
        raise EngineError(f"stable-diffusion.cpp crashed while {doing} {self._name} ({how}); "
                          "the file is probably not a complete model it supports")

    def _stop(self) -> None:
        """End the worker (asks, then terminates). Caller holds the lock."""
        proc, conn, self._proc, self._conn = self._proc, self._conn, None, None
        if proc is None:
            return
        try:
            conn.send(("close",))
        except (OSError, ValueError):
            pass
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join()
        conn.close()
