"""Sentence embeddings from a BERT-style ONNX encoder (engine kind ``onnx_runtime``), such as
all-MiniLM-L6-v2: tokenize with the model's ``tokenizer.json``, run the encoder, mean-pool the
last hidden state over the real (unpadded) tokens, L2-normalise. That is the model card's
recipe for all-MiniLM-L6-v2.

onnxruntime, tokenizers and numpy are imported in ``load()`` only; without them ``load``
raises ``EngineUnavailable("onnx_runtime", "embeddings")``.
"""
from __future__ import annotations

import os
import threading
import time

from hypnos.engines.errors import EngineError, EngineUnavailable
from hypnos.engines.records import EmbedResult, LoadReport, LoadSpec

#: Texts per encoder run.
BATCH_SIZE = 32
#: Tokens per text when the ONNX graph does not fix the sequence length (BERT's 512
#: position embeddings; longer texts are truncated, as sentence-transformers does).
DEFAULT_MAX_TOKENS = 512
PROVIDERS = ("CUDAExecutionProvider", "CPUExecutionProvider")


class OnnxEmbedder:
    """``Embedder`` over one ONNX encoder plus its Hugging Face ``tokenizer.json``.

    ``load`` asks onnxruntime for CUDA first (not when ``spec.gpu_layers`` is 0: a host
    placement), then the CPU, and records the provider the session really got in
    ``provider`` and its device ("cuda" or "cpu") in ``device``. ``embed`` may be called from
    several threads at once (an onnxruntime session runs concurrent ``run`` calls);
    ``unload`` must not overlap one (the scheduler's lease guarantees that).
    ``spec.threads`` caps the intra-op threads; ``spec.options["max_tokens"]`` overrides the
    truncation length.
    """

    kind = "onnx_runtime"

    def __init__(self) -> None:
        self._np = None
        self._session = None
        self._tokenizer = None
        self._inputs: tuple[str, ...] = ()
        self._output = ""
        self.provider: str | None = None
        self.device = "cpu"                 # "cuda" when the session got the CUDA provider
        self.max_tokens = DEFAULT_MAX_TOKENS
        self.dimensions = 0
        self._lifecycle = threading.Lock()

    # ------------------------------------------------------------------ lifecycle

    def load(self, spec: LoadSpec) -> LoadReport:
        """Read the model and the tokenizer and build the session. Blocks."""
        try:
            import numpy as np
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EngineUnavailable("onnx_runtime", "embeddings") from exc
        weights, tokenizer = spec.weights_path, spec.files.get("tokenizer_path")
        if weights is None or not weights.is_file():
            raise EngineError(f"{spec.model_id}: ONNX model not found: {weights}")
        if tokenizer is None or not tokenizer.is_file():
            raise EngineError(f"{spec.model_id}: an ONNX embedding model needs tokenizer_path "
                              f"(a tokenizer.json), got {tokenizer}")
        self.unload()
        t0 = time.perf_counter()
        with self._lifecycle:
            session = self._new_session(ort, spec)
            t1 = time.perf_counter()
            self._inputs, self._output = _io_names(spec.model_id, session)
            self.max_tokens = int(spec.options.get("max_tokens") or _fixed_length(session)
                                  or DEFAULT_MAX_TOKENS)
            self._tokenizer = _make_tokenizer(Tokenizer, tokenizer, self.max_tokens)
            self._np, self._session = np, session
            self.provider = session.get_providers()[0]
            self.device = "cuda" if self.provider == "CUDAExecutionProvider" else "cpu"
            self.dimensions = _hidden_size(session)
        return LoadReport(load_mode="read", weights_ms=(t1 - t0) * 1e3,
                          total_ms=(time.perf_counter() - t0) * 1e3)

    @staticmethod
    def _new_session(ort, spec: LoadSpec):
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = spec.threads or len(os.sched_getaffinity(0))
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        available = set(ort.get_available_providers())
        wanted = PROVIDERS if spec.gpu_layers != 0 else ("CPUExecutionProvider",)
        providers = [p for p in wanted if p in available] or ["CPUExecutionProvider"]
        try:
            return ort.InferenceSession(str(spec.weights_path), sess_options=opts,
                                        providers=providers)
        except Exception as exc:      # onnxruntime raises its own Fail/InvalidGraph types
            raise EngineError(f"{spec.model_id}: onnxruntime refused "
                              f"{spec.weights_path.name}: {exc}") from exc

    def unload(self) -> None:
        """Drop the session and the tokenizer. Idempotent."""
        with self._lifecycle:
            self._session = self._tokenizer = None
            self.provider = None

    # ------------------------------------------------------------------ requests

    def embed(self, texts: list[str], cancel: threading.Event) -> EmbedResult:
        """One unit vector per text, in input order; see ``Embedder.embed``. Texts longer
        than ``max_tokens`` are truncated (never a ContextOverflow). Texts are run in
        batches of ``BATCH_SIZE`` sorted by length (less padding); ``cancel`` is checked
        between batches and a cancelled call returns the vectors of the texts done so far
        (in input order, the others missing)."""
        session, tokenizer, np = self._session, self._tokenizer, self._np
        if session is None:
            raise EngineError("model not loaded")
        encodings = tokenizer.encode_batch(list(texts))
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        vectors: dict[int, list[float]] = {}
        for start in range(0, len(order), BATCH_SIZE):
            if cancel.is_set():
                break
            batch = order[start:start + BATCH_SIZE]
            pooled = self._run(session, np, [encodings[i] for i in batch])
            vectors.update(zip(batch, pooled.tolist(), strict=True))
        tokens = sum(len(e.ids) for e in encodings)
        return EmbedResult(vectors=[vectors[i] for i in range(len(texts)) if i in vectors],
                           prompt_tokens=tokens)

    def _run(self, session, np, encodings):
        """Encoder run over one batch padded to its longest text -> (n, dim) unit vectors."""
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, e in enumerate(encodings):
            ids[row, :len(e.ids)] = e.ids
            mask[row, :len(e.ids)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        try:
            (hidden,) = session.run([self._output], {k: feeds[k] for k in self._inputs})
        except Exception as exc:      # onnxruntime's own error types
            raise EngineError(f"onnxruntime failed: {exc}") from exc
        weights = mask[:, :, None].astype(hidden.dtype)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled / np.maximum(norms, 1e-12)


# ---------------------------------------------------------------------- helpers

_KNOWN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _io_names(model_id: str, session) -> tuple[tuple[str, ...], str]:
    """The inputs this graph takes (of the three a BERT encoder may) and its token-level
    output (``last_hidden_state``, else the first output)."""
    names = tuple(i.name for i in session.get_inputs())
    unknown = [n for n in names if n not in _KNOWN_INPUTS]
    if unknown or "input_ids" not in names:
        raise EngineError(f"{model_id}: not a BERT-style encoder: inputs {list(names)} "
                          f"(expected input_ids, attention_mask, token_type_ids)")
    outputs = [o.name for o in session.get_outputs()]
    return names, "last_hidden_state" if "last_hidden_state" in outputs else outputs[0]


def _fixed_length(session) -> int | None:
    """The sequence length when the graph fixes it (an int in input_ids' shape)."""
    shape = next(i.shape for i in session.get_inputs() if i.name == "input_ids")
    return shape[1] if len(shape) > 1 and isinstance(shape[1], int) and shape[1] > 0 else None


def _hidden_size(session) -> int:
    shape = session.get_outputs()[0].shape
    return shape[-1] if shape and isinstance(shape[-1], int) else 0


def _make_tokenizer(tokenizer_cls, path, max_tokens: int):
    """The model's tokenizer, truncating to ``max_tokens`` and not padding (``_run`` pads
    each batch to its longest text; the shipped tokenizer.json pads every text to 128)."""
    tok = tokenizer_cls.from_file(str(path))
    tok.no_padding()
    tok.enable_truncation(max_length=max_tokens)
    return tok
