"""Embeddings from a GGUF model on llama.cpp (engine kind ``ggml_llama``, modality
``embeddings``): nomic-embed, EmbeddingGemma, bge and the like.

The pooling is the GGUF's own (``<arch>.pooling_type``: mean, CLS, last token). A GGUF that
declares none (a chat model loaded for embeddings) is rebuilt with llama.cpp's mean pooling:
llama-cpp-python reads per-token outputs of every sequence but the first in a batch from the
wrong offset (0.3.36), so pooling over token outputs here would be wrong. Vectors are
L2-normalised.

llama-cpp-python is imported in ``load()`` only; without it ``load`` raises
``EngineUnavailable("ggml_llama", "llama")``.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time

from hypnos.engines.errors import ContextOverflow, EngineError, EngineUnavailable
from hypnos.engines.llama.compute_threads import on_own_thread
from hypnos.engines.llama.cpu import extra_buffers_ok
from hypnos.engines.records import EmbedResult, LoadReport, LoadSpec

#: Texts per ``Llama.embed`` call (cancel is checked between calls).
BATCH_SIZE = 32
DEFAULT_CONTEXT = 512


class LlamaEmbedder:
    """``Embedder`` over one GGUF model through ``llama_cpp.Llama(embedding=True)``.

    The context holds ``spec.context_len`` tokens (default 512), and so does one batch: a text
    longer than that is a ContextOverflow, not truncated. ``embed`` calls are serialised (one
    llama.cpp context); ``unload`` must not overlap one (the scheduler's lease guarantees it).
    ``spec.threads`` defaults to every CPU this process may use; ``spec.gpu_layers`` is passed
    on (ignored by a CPU build). ``pooling`` names the pooling in use once loaded.
    """

    kind = "ggml_llama"

    def __init__(self) -> None:
        self._llm = None
        self._np = None
        self.pooling = ""
        self.n_ctx = 0
        self.dimensions = 0
        self._lock = threading.Lock()

    def load(self, spec: LoadSpec) -> LoadReport:
        """Map the weights and build an embedding context. Blocks."""
        try:
            import llama_cpp
            import numpy as np
        except ImportError as exc:
            raise EngineUnavailable("ggml_llama", "llama") from exc
        from hypnos.engines.llama.log import route_once
        if spec.weights_path is None or not spec.weights_path.is_file():
            raise EngineError(f"{spec.model_id}: weights file not found: {spec.weights_path}")
        self.unload()
        ll = llama_cpp.llama_cpp
        route_once(ll, "hypnos.engines.llama.cpp", ll.llama_log_set)
        t0 = time.perf_counter()
        llm = _build(llama_cpp, spec, llama_cpp.LLAMA_POOLING_TYPE_UNSPECIFIED)
        pooling = _POOLING_NAMES.get(llm.pooling_type(), str(llm.pooling_type()))
        if llm.pooling_type() == llama_cpp.LLAMA_POOLING_TYPE_NONE:
            llm.close()
            llm = _build(llama_cpp, spec, llama_cpp.LLAMA_POOLING_TYPE_MEAN)
            pooling = "mean (the GGUF declares none)"
        elif llm.pooling_type() == llama_cpp.LLAMA_POOLING_TYPE_RANK:
            llm.close()
            raise EngineError(f"{spec.model_id}: {spec.weights_path.name} is a reranker "
                              "(rank pooling), not an embedding model: give it "
                              "modality = \"rerank\"")
        with self._lock:
            self._llm, self._np = llm, np
            self.pooling = pooling
            self.n_ctx = llm.n_batch
            self.dimensions = llm.n_embd()
        ms = (time.perf_counter() - t0) * 1e3
        return LoadReport(load_mode="mmap", weights_ms=ms, total_ms=ms)

    def unload(self) -> None:
        """Free the context and the model. Idempotent."""
        with self._lock:
            llm, self._llm = self._llm, None
            if llm is not None:
                llm.close()

    def embed(self, texts: list[str], cancel: threading.Event) -> EmbedResult:
        """One unit vector per text, in input order; see ``Embedder.embed``. Raises
        ContextOverflow naming the text when one is longer than the context. ``cancel`` is
        checked between batches of ``BATCH_SIZE``; a cancelled call returns the vectors done
        so far."""
        with self._lock:
            llm = self._llm
            if llm is None:
                raise EngineError("model not loaded")
            for i, text in enumerate(texts):
                n = len(llm.tokenize(text.encode("utf-8")))
                if n == 0:
                    raise EngineError(f"input[{i}] has no tokens to embed")
                if n > self.n_ctx:
                    raise ContextOverflow(f"input[{i}] is {n} tokens; this model's context "
                                          f"holds {self.n_ctx}")
            vectors: list[list[float]] = []

            def batches() -> int:
                tokens = 0
                for start in range(0, len(texts), BATCH_SIZE):
                    if cancel.is_set():
                        break
                    out, count = llm.embed(texts[start:start + BATCH_SIZE], normalize=False,
                                           truncate=False, return_count=True)
                    vectors.extend(self._finish(out))
                    tokens += count
                return tokens

            # On a thread that ends with the call (``compute_threads``).
            tokens = on_own_thread(batches, "llama-embed")
        return EmbedResult(vectors=vectors, prompt_tokens=tokens)

    def _finish(self, out) -> list[list[float]]:
        """L2-normalise one batch of pooled ``Llama.embed`` vectors."""
        np = self._np
        pooled = np.asarray(out, dtype=np.float32)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).tolist()


# llama_pooling_type -> name (llama.h)
_POOLING_NAMES = {0: "none", 1: "mean", 2: "cls", 3: "last", 4: "rank"}


_PARAMS_LOCK = threading.Lock()


@contextlib.contextmanager
def _model_params(extra_buffers: bool):
    """``Llama`` builds its model parameters itself and has no argument for
    ``use_extra_bufts``: while this is held, the defaults it reads carry our value (the chat
    engine's AMX rule, ``extra_buffers_ok``)."""
    import llama_cpp.llama as high
    with _PARAMS_LOCK:
        original = high.llama_cpp.llama_model_default_params

        def defaults():
            params = original()
            params.use_extra_bufts = extra_buffers
            return params

        high.llama_cpp.llama_model_default_params = defaults
        try:
            yield
        finally:
            high.llama_cpp.llama_model_default_params = original


def _build(llama_cpp, spec: LoadSpec, pooling: int):
    """``Llama`` in embedding mode whose context and batch hold ``spec.context_len`` tokens
    (one text must fit one micro-batch for non-causal encoders). Blocks."""
    n_ctx = spec.context_len or DEFAULT_CONTEXT
    threads = spec.threads or len(os.sched_getaffinity(0))
    try:
        with _model_params(extra_buffers=extra_buffers_ok()):
            return llama_cpp.Llama(
                model_path=str(spec.weights_path), embedding=True, pooling_type=pooling,
                n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, n_threads=threads,
                n_threads_batch=threads, n_gpu_layers=spec.gpu_layers, verbose=False)
    except ValueError as exc:          # llama-cpp-python's "Failed to load model" and kin
        raise EngineError(f"{spec.model_id}: llama.cpp refused "
                          f"{spec.weights_path.name}: {exc}") from exc
