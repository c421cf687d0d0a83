"""Image generation and edits with stable-diffusion.cpp (engine kind ``ggml_diffusion``),
through stable-diffusion-cpp-python.

Files: ``weights_path`` is the model. Alone it is a whole checkpoint (SD 1.x/2.x/XL, SD-Turbo:
UNet, text encoders and VAE in one GGUF or safetensors file). With ``text_encoder_path`` it
is a standalone diffusion model (FLUX.2 klein) whose text encoder is that LLM file, and
``aux_path`` is the VAE. Every file is checked to be a GGUF, safetensors or PyTorch
checkpoint before the library sees it, so a wrong file is a clear error, not a crash.

The library is imported in ``load()`` only; without it ``load`` raises
``EngineUnavailable("ggml_diffusion", "images")``. Images are made one per library call with
seed + index, so any image can be remade alone from its reported seed.
"""
from __future__ import annotations

import io
import json
import os
import struct
import threading
import time
from pathlib import Path

from hypnos.engines.base import (EngineError, EngineUnavailable, GeneratedImage, ImageRequest,
                                 LoadReport, LoadSpec)

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
    """``ImageGenerator`` over one stable-diffusion.cpp context. Calls are serialised: the
    context runs one generation at a time."""

    kind = "ggml_diffusion"

    def __init__(self) -> None:
        self._sd = None
        self._image_cls = None
        self._lock = threading.Lock()

    def load(self, spec: LoadSpec) -> LoadReport:
        """Check the files, import the library, build the context. Blocks (seconds to
        minutes: the weights are read in full)."""
        t0 = time.perf_counter()
        encoder = spec.files.get("text_encoder_path")
        vae = spec.files.get("aux_path")
        check_model_file(spec.weights_path)
        if encoder is not None:
            check_model_file(encoder, "text encoder")
        if vae is not None:
            check_model_file(vae, "VAE")
        try:
            from PIL import Image
            from stable_diffusion_cpp import StableDiffusion
        except ImportError as exc:
            raise EngineUnavailable("ggml_diffusion", "images") from exc
        paths = ({"diffusion_model_path": str(spec.weights_path), "llm_path": str(encoder)}
                 if encoder is not None else {"model_path": str(spec.weights_path)})
        if vae is not None:
            paths["vae_path"] = str(vae)
        threads = spec.threads or len(os.sched_getaffinity(0))
        try:
            sd = StableDiffusion(**paths, n_threads=threads, verbose=False)
        except (ValueError, RuntimeError, OSError) as exc:
            raise EngineError(f"{spec.model_id}: stable-diffusion.cpp refused the model: "
                              f"{exc}") from exc
        with self._lock:
            self._sd, self._image_cls = sd, Image
        ms = (time.perf_counter() - t0) * 1e3
        return LoadReport(load_mode="read", weights_ms=ms, total_ms=ms)

    def unload(self) -> None:
        with self._lock:
            sd, self._sd = self._sd, None
        if sd is not None:
            sd.close()

    def generate(self, req: ImageRequest, cancel: threading.Event) -> list[GeneratedImage]:
        with self._lock:
            if self._sd is None:
                raise EngineError("model not loaded")
            refs = [self._decode(raw) for raw in req.references]
            out: list[GeneratedImage] = []
            for i in range(req.n):
                if cancel.is_set():
                    break
                seed = req.seed + i
                kwargs = {"sample_method": req.sampler} if req.sampler else {}
                try:
                    (image,) = self._sd.generate_image(
                        prompt=req.prompt, negative_prompt=req.negative_prompt,
                        width=req.width, height=req.height, sample_steps=req.steps,
                        cfg_scale=req.cfg_scale, seed=seed, batch_count=1,
                        ref_images=refs or None, **kwargs)
                except (ValueError, RuntimeError) as exc:
                    raise EngineError(f"stable-diffusion.cpp failed: {exc}") from exc
                buf = io.BytesIO()
                image.save(buf, format="PNG")
                out.append(GeneratedImage(buf.getvalue(), seed))
        return out

    def _decode(self, raw: bytes):
        try:
            return self._image_cls.open(io.BytesIO(raw)).convert("RGB")
        except OSError as exc:
            raise EngineError(f"a reference image cannot be decoded: {exc}") from exc
