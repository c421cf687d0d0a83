"""How ``LlamaChatEngine.load`` builds its parts: the model (``_load_model``, with its RPC
split), the context (``_new_context``: its slots, batch and KV layout), the chat formatter
(``_make_formatter``), the device report and the prompt cache's binding. A mixin over the
engine's ``_ll``, ``_model``, ``_ctx``, ``_vocab``, ``layout``, ``fingerprint`` and the
fields each method sets; ``load`` itself, which orders them, stays in ``engine``.
"""
from __future__ import annotations

import logging
import os

from hypnos.engines import devices
from hypnos.engines.chat_format.detect import detect
from hypnos.engines.errors import EngineError
from hypnos.engines.llama import log as ggml_log
from hypnos.engines.llama.cpu import extra_buffers_ok, reads_weights
from hypnos.engines.llama.prompt_cache import ModelCache, PromptCache
from hypnos.engines.llama.prompt_cache_file import cache_identity
from hypnos.engines.llama.speculative.choose import rs_snapshots, uses_mtp
from hypnos.engines.llama.state import KVLayout
from hypnos.engines.records import LoadSpec

log = logging.getLogger("hypnos.engines.llama.engine")

DEFAULT_N_BATCH = 512


class LoadingMixin:
    """The steps of ``load`` (see the module)."""

    def _attach_cache(self, spec: LoadSpec) -> ModelCache | None:
        """The prompt cache (``spec.options["prompt_cache"]``, a ``PromptCache``) bound to
        these weights, KV types and llama.cpp state format; None without one."""
        cache = spec.options.get("prompt_cache")
        if not isinstance(cache, PromptCache):
            self._cache = None
            return None
        import llama_cpp
        # An empty sequence's state size (nothing is used yet) grows with the KV streams, one
        # per slot, and llama.cpp loads a state only into as many streams as it came from.
        empty = self._ll.llama_state_seq_get_size(self._ctx, 0)
        state_format = f"llama-cpp-python {llama_cpp.__version__}; empty seq {empty}"
        self._cache = cache.attach(spec.model_id, cache_identity(
            self.fingerprint, self.layout.as_dict(), state_format))
        return self._cache

    @staticmethod
    def _weights_key(spec: LoadSpec) -> tuple:
        """What a kept model must have been loaded with to serve ``spec`` as is."""
        path = spec.weights_path
        st = os.stat(path) if path is not None and path.is_file() else None
        return (str(path), st.st_size if st else 0, st.st_mtime_ns if st else 0,
                spec.gpu_layers, bool(spec.options.get("extra_buffers", extra_buffers_ok())),
                repr(spec.options.get("rpc_split")), spec.options.get("read_weights"),
                uses_mtp(spec))

    def _load_model(self, spec: LoadSpec):
        ll = self._ll
        params = ll.llama_model_default_params()
        params.n_gpu_layers = spec.gpu_layers
        split = spec.options.get("rpc_split")
        self.weights_read = bool(spec.options.get(
            "read_weights", reads_weights(devices.llama_backend(), rpc_split=bool(split))))
        params.load_mode = ll.LLAMA_LOAD_MODE_NONE if self.weights_read \
            else ll.LLAMA_LOAD_MODE_MMAP
        params.use_extra_bufts = bool(spec.options.get("extra_buffers", extra_buffers_ok()))
        if uses_mtp(spec):                  # its nextn layers too
            from hypnos.engines.llama.speculative.mtp import enable_mtp_loading
            enable_mtp_loading(params)
        if split:       # RPC workers hold the last layers (a split engine's child only)
            from hypnos.engines.llama.rpc import RpcDevices, RpcShare
            self._rpc = RpcDevices(ll, [RpcShare(e, n) for e, n in split],
                                   local_gpu_layers=max(0, spec.gpu_layers))
            self._rpc.apply(params)
        model = ll.llama_model_load_from_file(str(spec.weights_path).encode(), params)
        if not model:
            raise EngineError(f"{spec.model_id}: llama.cpp refused {spec.weights_path.name}")
        return model

    def _report_device(self, model_id: str, lines: list[str]) -> None:
        """The layers llama.cpp says it offloaded, and the device that makes this model's."""
        self.offloaded_layers = ggml_log.offloaded_layers(lines)
        backend = devices.llama_backend()
        self.device = backend if self.offloaded_layers > 0 and backend != "cpu" else "cpu"
        log.info("%s: %d layers offloaded to the GPU (%s)", model_id, self.offloaded_layers,
                 self.device)

    def _new_context(self, spec: LoadSpec):
        ll = self._ll
        params = ll.llama_context_default_params()
        threads = spec.threads or len(os.sched_getaffinity(0))
        n_batch = min(int(spec.options.get("n_batch", DEFAULT_N_BATCH)), spec.context_len)
        params.n_ctx = spec.context_len
        params.n_seq_max = spec.slots
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_threads = threads
        params.n_threads_batch = threads
        params.kv_unified = False              # each slot owns context_len / slots cells
        params.no_perf = True
        params.n_rs_seq = rs_snapshots(spec)   # a hybrid target rolls drafts back
        # A full-sized sliding-window cache (llama.cpp's default) never loses a window; off
        # (``options["swa_full"] = False``) it is smaller and prefix reuse needs checkpoints.
        params.swa_full = bool(spec.options.get("swa_full", True))
        self._swa_full = params.swa_full
        ctx = ll.llama_init_from_model(self._model, params)
        if not ctx:
            raise EngineError(f"{spec.model_id}: llama.cpp could not build a context of "
                              f"{spec.context_len} tokens x {spec.slots} slots")
        self.layout = KVLayout(
            n_ctx=ll.llama_n_ctx(ctx), slots=spec.slots, n_ctx_per_slot=ll.llama_n_ctx_seq(ctx),
            type_k=params.type_k, type_v=params.type_v, flash_attn=params.flash_attn_type,
            kv_unified=bool(params.kv_unified))
        return ctx

    def _make_formatter(self, spec: LoadSpec, formatter_cls):
        ll = self._ll
        template = spec.chat_template
        if template is None:
            raw = ll.llama_model_chat_template(self._model, None)
            template = raw.decode("utf-8") if raw else None
        self.has_template = bool(template)
        self._no_template = None if template else (
            f"{spec.model_id} has no chat template (a base model: its GGUF carries none); "
            "use /v1/completions, or set chat_template in its config")
        bos = ll.llama_vocab_bos(self._vocab)
        eos = ll.llama_vocab_eos(self._vocab)
        self._bos = bos if bos != ll.LLAMA_TOKEN_NULL and ll.llama_vocab_get_add_bos(
            self._vocab) else None
        def text(tok: int) -> str:
            if tok == ll.LLAMA_TOKEN_NULL:
                return ""
            return ll.llama_vocab_get_text(self._vocab, tok).decode("utf-8", "replace")
        self._bos_text = text(bos) if self._bos is not None else ""
        self.format = detect(template or "", spec.options.get("tool_format", "auto"))
        if not template:
            return None
        return formatter_cls(template, eos_token=text(eos), bos_token=text(bos))
