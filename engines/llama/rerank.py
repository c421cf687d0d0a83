"""Relevance scores from a reranker GGUF on llama.cpp (engine kind ``ggml_llama``, modality
``rerank``): bge-reranker, Qwen3-Reranker, jina-reranker, any GGUF whose pooling is rank.

Each (query, document) pair is one sequence, written the way llama.cpp's own server writes
it: the GGUF's ``tokenizer.chat_template.rerank`` with ``{query}`` and ``{document}`` filled
in where it carries one (control tokens in it are read as such), else
``[BOS] query [EOS] [SEP] document [EOS]``, each special added only where the vocabulary asks
for it (an EOS the vocabulary lacks is its SEP). Rank pooling puts the model's classification
head on the sequence; its first output is the score, unscaled, as llama-server reports it.

Pairs are packed into batches of up to ``PARALLEL`` sequences and the context's tokens; a pair
longer than the context is a ContextOverflow naming the document, never truncated.

llama-cpp-python is imported in ``load()`` only; without it ``load`` raises
``EngineUnavailable("ggml_llama", "llama")``.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from hypnos.engines.errors import ContextOverflow, EngineError, EngineUnavailable
from hypnos.engines.llama.compute_threads import on_own_thread
from hypnos.engines.llama.cpu import extra_buffers_ok
from hypnos.engines.records import LoadReport, LoadSpec, RerankRequest, RerankResult

#: Sequences evaluated together in one batch.
PARALLEL = 8
DEFAULT_CONTEXT = 512


def pair_tokens(tokenize: Callable[[str, bool], list[int]], template: str | None,
                specials: tuple[int | None, int | None, int | None],
                query: str, document: str) -> list[int]:
    """One (query, document) sequence. ``specials``: the BOS, EOS and SEP to add (None where
    the vocabulary adds none). ``tokenize(text, parse_special)`` adds no specials itself."""
    if template is not None:
        return tokenize(template.replace("{query}", query).replace("{document}", document),
                        True)
    bos, eos, sep = specials
    out = [bos] if bos is not None else []
    out += tokenize(query, False)
    out += [t for t in (eos, sep) if t is not None]
    out += tokenize(document, False)
    return out + ([eos] if eos is not None else [])


def pack(lengths: list[int], n_tokens: int, n_seqs: int) -> list[list[int]]:
    """Indices of ``lengths`` grouped in order so that no group holds more than ``n_tokens``
    tokens or ``n_seqs`` sequences (each length is at most ``n_tokens``)."""
    groups: list[list[int]] = []
    used = 0
    for i, n in enumerate(lengths):
        if not groups or used + n > n_tokens or len(groups[-1]) >= n_seqs:
            groups.append([])
            used = 0
        groups[-1].append(i)
        used += n
    return groups


class LlamaReranker:
    """``Reranker`` (``protocols``) over one reranker GGUF through llama.cpp's low-level API.

    The context holds ``spec.context_len`` tokens (default 512; at most the model's trained
    context) in one batch, shared by up
    to ``PARALLEL`` sequences. ``rerank`` calls are serialised (one context); ``unload``
    must not overlap one (the scheduler's lease guarantees it). A GGUF whose pooling is not
    rank is refused at load (an embedding or chat model: give it another modality).
    """

    kind = "ggml_llama"

    def __init__(self) -> None:
        self._ll = None
        self._model = None
        self._ctx = None
        self._vocab = None
        self._template: str | None = None
        self._specials: tuple[int | None, int | None, int | None] = (None, None, None)
        self.n_ctx = 0
        self._lock = threading.Lock()

    def load(self, spec: LoadSpec) -> LoadReport:
        """Map the weights and build a rank-pooling context. Blocks."""
        try:
            from llama_cpp import llama_cpp as ll
        except ImportError as exc:
            raise EngineUnavailable("ggml_llama", "llama") from exc
        from hypnos.engines.llama.log import route_once
        if spec.weights_path is None or not spec.weights_path.is_file():
            raise EngineError(f"{spec.model_id}: weights file not found: {spec.weights_path}")
        self.unload()
        route_once(ll, "hypnos.engines.llama.cpp", ll.llama_log_set)
        ll.llama_backend_init()
        t0 = time.perf_counter()
        params = ll.llama_model_default_params()
        params.n_gpu_layers = spec.gpu_layers
        params.use_extra_bufts = extra_buffers_ok()
        model = ll.llama_model_load_from_file(str(spec.weights_path).encode(), params)
        if not model:
            raise EngineError(f"{spec.model_id}: llama.cpp refused {spec.weights_path.name}")
        # Never past the trained context: an encoder has no positions beyond it.
        n_ctx = min(spec.context_len or DEFAULT_CONTEXT, ll.llama_model_n_ctx_train(model))
        threads = spec.threads or len(os.sched_getaffinity(0))
        cp = ll.llama_context_default_params()
        cp.embeddings = True
        cp.pooling_type = ll.LLAMA_POOLING_TYPE_UNSPECIFIED      # the GGUF's own
        cp.n_ctx = cp.n_batch = cp.n_ubatch = n_ctx
        cp.n_seq_max = PARALLEL
        cp.kv_unified = True
        cp.n_threads = cp.n_threads_batch = threads
        ctx = ll.llama_init_from_model(model, cp)
        if not ctx:
            ll.llama_model_free(model)
            raise EngineError(f"{spec.model_id}: llama.cpp could not build a context of "
                              f"{n_ctx} tokens")
        if ll.llama_pooling_type(ctx) != ll.LLAMA_POOLING_TYPE_RANK:
            ll.llama_free(ctx)
            ll.llama_model_free(model)
            raise EngineError(f"{spec.model_id}: {spec.weights_path.name} is not a reranker "
                              "(its pooling is not rank); give it modality \"embeddings\" or "
                              "\"text_generation\"")
        vocab = ll.llama_model_get_vocab(model)
        raw = ll.llama_model_chat_template(model, b"rerank")
        with self._lock:
            self._ll, self._model, self._ctx, self._vocab = ll, model, ctx, vocab
            self._template = raw.decode("utf-8") if raw else None
            self._specials = _specials(ll, vocab)
            self.n_ctx = n_ctx
        ms = (time.perf_counter() - t0) * 1e3
        return LoadReport(load_mode="mmap", weights_ms=ms, total_ms=ms)

    def unload(self) -> None:
        """Free the context and the model. Idempotent."""
        with self._lock:
            if self._ctx is not None:
                self._ll.llama_free(self._ctx)
                self._ctx = None
            if self._model is not None:
                self._ll.llama_model_free(self._model)
                self._model = None

    def pairs(self, req: RerankRequest) -> list[list[int]]:
        """Each document's sequence; ContextOverflow names the first that does not fit."""
        from hypnos.engines.llama.prompt import tokenize
        seqs = []
        for i, doc in enumerate(req.documents):
            toks = pair_tokens(lambda text, special: tokenize(self._ll, self._vocab, text,
                                                              special),
                               self._template, self._specials, req.query, doc)
            if len(toks) > self.n_ctx:
                raise ContextOverflow(f"documents[{i}] with the query is {len(toks)} tokens; "
                                      f"this reranker's context holds {self.n_ctx}",
                                      len(toks), self.n_ctx)
            seqs.append(toks)
        return seqs

    def rerank(self, req: RerankRequest, cancel: threading.Event) -> RerankResult:
        """See ``Reranker.rerank``. Blocks."""
        with self._lock:
            if self._ctx is None:
                raise EngineError("model not loaded")
            seqs = self.pairs(req)
            scores = [0.0] * len(seqs)

            def groups() -> None:
                for group in pack([len(s) for s in seqs], self.n_ctx, PARALLEL):
                    if cancel.is_set():
                        raise EngineError("cancelled")
                    for i, score in zip(group, self._score([seqs[i] for i in group]),
                                        strict=True):
                        scores[i] = score

            on_own_thread(groups, "llama-rerank")     # ``compute_threads``
        return RerankResult(scores=scores, prompt_tokens=sum(len(s) for s in seqs))

    def _score(self, seqs: list[list[int]]) -> list[float]:
        """One batch: sequence k is seq id k; the score is its pooled output's first value."""
        ll, ctx = self._ll, self._ctx
        mem = ll.llama_get_memory(ctx)
        if mem:
            ll.llama_memory_clear(mem, True)
        total = sum(len(s) for s in seqs)
        batch = ll.llama_batch_init(total, 0, len(seqs))
        try:
            n = 0
            for k, toks in enumerate(seqs):
                for pos, tok in enumerate(toks):
                    batch.token[n] = tok
                    batch.pos[n] = pos
                    batch.n_seq_id[n] = 1
                    batch.seq_id[n][0] = k
                    batch.logits[n] = True          # pooling reads every output
                    n += 1
            batch.n_tokens = n
            # An encoder (no KV memory) is encoded; a decoder reranker (Qwen3) is decoded.
            rc = (ll.llama_decode if mem else ll.llama_encode)(ctx, batch)
            if rc != 0:
                raise EngineError(f"llama.cpp could not evaluate the batch ({rc})")
            out = []
            for k in range(len(seqs)):
                ptr = ll.llama_get_embeddings_seq(ctx, k)
                if not ptr:
                    raise EngineError("llama.cpp gave no rank output")
                out.append(float(ptr[0]))
            return out
        finally:
            ll.llama_batch_free(batch)


def _specials(ll, vocab) -> tuple[int | None, int | None, int | None]:
    """The BOS, EOS and SEP a rerank pair gets (llama-server's rule)."""
    null = ll.LLAMA_TOKEN_NULL
    bos, eos, sep = ll.llama_vocab_bos(vocab), ll.llama_vocab_eos(vocab), ll.llama_vocab_sep(vocab)
    if eos == null:
        eos = sep
    return (bos if ll.llama_vocab_get_add_bos(vocab) and bos != null else None,
            eos if ll.llama_vocab_get_add_eos(vocab) and eos != null else None,
            sep if ll.llama_vocab_get_add_sep(vocab) and sep != null else None)
