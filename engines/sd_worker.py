"""The child process that owns a stable-diffusion.cpp context (see `sd_diffusion`).

stable-diffusion.cpp does not survive every bad file: a GGUF that is not a complete model can
end in a segfault or a floating-point exception inside the library. Running it in its own
process turns such a crash into an error the server reports, instead of the server's death.

Protocol over one ``multiprocessing`` pipe, one message at a time:
  child -> ("ready",) | ("error", message)            after building the context
  parent -> ("generate", kwargs)  child -> ("image", png_bytes) | ("error", message)
  parent -> ("close",)            the child frees the context and exits
"""
from __future__ import annotations

import io


def main(conn, paths: dict, threads: int) -> None:
    """Entry point of the child (spawned: imports nothing of the parent's state)."""
    try:
        from stable_diffusion_cpp import StableDiffusion
        sd = StableDiffusion(**paths, n_threads=threads, verbose=False)
    except Exception as exc:  # noqa: BLE001 - every failure goes back as a message
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    # The bindings test the context for None, but a failed load returns a NULL pointer.
    if not sd.model:
        conn.send(("error", "it could not build a context from the file (no model it "
                            "recognises in it)"))
        return
    conn.send(("ready",))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            break
        if message[0] != "generate":
            break
        try:
            kwargs = dict(message[1])
            refs = kwargs.pop("references", [])
            if refs:
                from PIL import Image
                kwargs["ref_images"] = [Image.open(io.BytesIO(r)).convert("RGB") for r in refs]
            (image,) = sd.generate_image(**kwargs)
            buf = io.BytesIO()
            image.save(buf, format="PNG")
            conn.send(("image", buf.getvalue()))
        except Exception as exc:  # noqa: BLE001
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
    sd.close()
