"""Chat on llama.cpp (engine kind ``ggml_llama``) with parallel slots and prefix reuse.

The high-level ``llama_cpp.Llama`` class ignores ``n_seq_max``, so this engine drives the
low-level bindings: one context with ``spec.slots`` KV sequences (not unified: each slot gets
``context_len / slots`` tokens), and a ``DecodeLoop`` thread that batches every active slot
into one ``llama_decode`` per step. ``chat`` runs in the caller's thread: it renders and
tokenizes the prompt, queues a job, and turns the token bytes it gets back into text.

KV parking (``park``/``restore``) and sessions (``export_session``/``import_session``/
``release_session``, ``ChatRequest.session_key``; in ``sessions``) move per-slot KV state
through ``state`` on the decode thread. ``load``'s steps (model, context, formatter) are in
``loading``. The prompt is built in ``prompt``, the answer read in ``reader``; the decode
thread and its slots are ``decode_loop`` and ``slots``.

llama-cpp-python is imported in ``load()`` only; without it ``load`` raises
``EngineUnavailable("ggml_llama", "llama")``.
"""
from __future__ import annotations

import logging
import os
import threading
import time

from hypnos.engines import devices
from hypnos.engines.chat_format.closing import CallCloser
from hypnos.engines.chat_format.prepare import ChatFormat
from hypnos.engines.chat_format.stream import StopMatcher
from hypnos.engines.errors import (ContextOverflow, EngineError, EngineUnavailable, InvalidGrammar,
                                   NoChatTemplate)
from hypnos.engines.llama import log as ggml_log
from hypnos.engines.llama import prompt as prompts
from hypnos.engines.llama import state as llama_state
from hypnos.engines.llama.compute_threads import on_own_thread
from hypnos.engines.llama.decode_loop import DecodeLoop
from hypnos.engines.llama.prompt_cache import ModelCache
from hypnos.engines.llama.reader import AnswerReader, TokenEvents, collect, timings
from hypnos.engines.llama.sampling import Sampling, grammar_sampler
from hypnos.engines.llama.loading import LoadingMixin
from hypnos.engines.llama.sessions import SessionsMixin
from hypnos.engines.llama.slots import Job, JobRules
from hypnos.engines.llama.speculative.choose import (Speculation, build_speculation,
                                                     setup_job)
from hypnos.engines.llama.state import KVLayout
from hypnos.engines.records import (ChatRequest, ChatResult, LoadReport, LoadSpec, OnToken,
                                    RerankRequest, RerankResult)

log = logging.getLogger(__name__)


class LlamaChatEngine(LoadingMixin, SessionsMixin):
    """``KVChatEngine`` (``protocols``) over one GGUF model. Construction is cheap; ``load``
    builds it.

    ``chat`` may be called from up to ``slots`` threads at once (more wait, FIFO, and report
    the wait as ``queue_ms``). ``unload`` must not overlap a ``chat`` call (the scheduler's
    lease guarantees that); a call still waiting then gets an EngineError. The context is
    sized once at load: ``ChatRequest.num_ctx`` is the scheduler's business, not read here.
    ``spec.threads`` defaults to every CPU this process may use; ``spec.gpu_layers`` is
    passed on (ignored by a CPU build); ``cpu_expert_layers`` is not supported by these
    bindings (tensor buffer overrides are unexposed) and is ignored.
    ``spec.options["swa_full"]`` (default True, llama.cpp's): a sliding-window model's window
    cache holds the whole context; False makes it window-sized, and its slots then keep
    context checkpoints as a hybrid model's do (``checkpoints``).
    ``spec.options["read_weights"]``: read the weights into memory (True) or map the file
    (False); by default ``cpu.reads_weights`` decides (read on a Linux CPU build).
    """

    kind = "ggml_llama"

    def __init__(self) -> None:
        self._ll = None
        self._model = None
        self._ctx = None
        self._vocab = None
        self._loop: DecodeLoop | None = None
        self._formatter = None
        self._no_template: str | None = None
        #: The GGUF (or the config) carries a chat template; False for a base model.
        self.has_template = True
        self.format: ChatFormat | None = None
        self._projector = None                 # vision / audio projector (mmproj), if any
        self._bos: int | None = None
        self._bos_text = ""
        self._n_batch = 0
        self.slots = 0
        self.n_ctx_per_slot = 0
        self.model_id = ""
        self.layout: KVLayout | None = None
        self.fingerprint = ""
        self._lifecycle = threading.Lock()
        # What the load really got: layers llama.cpp put on a GPU, and so the device.
        self.offloaded_layers = 0
        self.device = "cpu"
        # The weights a kept model was loaded with (``release_context``), and how many times
        # this engine read weights in (a promotion from a warm tier 2 does not).
        self._model_key: tuple | None = None
        self._template_key: str | None = None
        self.model_loads = 0
        self.weights_read = False       # the weights read into memory, not mapped (``cpu``)
        # A split load (``spec.options["rpc_split"]``): its RPC devices, and the layers
        # llama.cpp logged on each ("local" for this process).
        self._rpc = None
        self.split_layers: dict[str, int] = {}
        self._spec: Speculation | None = None  # speculative decoding (``spec.options``)
        self._draft = None                     # its draft model (``DraftModel``), if any
        self._swa_full = True                  # the context's window cache is full-sized
        self._cache: ModelCache | None = None  # the prompt cache (``spec.options``), if any
        self._threads = 1
        self._judging = threading.Lock()       # one rerank's scratch context at a time

    # ------------------------------------------------------------------ lifecycle

    def load(self, spec: LoadSpec) -> LoadReport:
        """Map the weights, build the context and start the decode thread. Blocks."""
        try:
            devices.preload_cuda_runtime()
            from llama_cpp import llama_cpp as ll
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        except ImportError as exc:
            raise EngineUnavailable("ggml_llama", "llama") from exc
        if spec.weights_path is None or not spec.weights_path.is_file():
            raise EngineError(f"{spec.model_id}: weights file not found: {spec.weights_path}")
        max_slots = ll.llama_max_parallel_sequences()
        if not 1 <= spec.slots <= max_slots:
            raise EngineError(f"{spec.model_id}: slots must be 1..{max_slots}, not {spec.slots}")
        key = self._weights_key(spec)
        with self._lifecycle:
            warm = self._model is not None and self._ctx is None and self._model_key == key
            self._free_locked(keep_model=warm)
            ggml_log.route_once(ll, "hypnos.engines.llama.cpp", ll.llama_log_set)
            ll.llama_backend_init()
            self._ll = ll
            t0 = time.perf_counter()
            if not warm:
                with ggml_log.capture("hypnos.engines.llama.cpp") as lines:
                    self._model = self._load_model(spec)
                self._model_key = key
                self.model_loads += 1
                self._report_device(spec.model_id, lines)
                if self._rpc is not None:
                    self.split_layers = self._rpc.assigned(lines)
            t1 = time.perf_counter()
            try:
                self._ctx = self._new_context(spec)
                t2 = time.perf_counter()
                if not warm or self._template_key != spec.chat_template:
                    self._vocab = ll.llama_model_get_vocab(self._model)
                    self._formatter = self._make_formatter(spec, Jinja2ChatFormatter)
                    self._template_key = spec.chat_template
                    self.fingerprint = llama_state.weights_fingerprint(spec.weights_path)
                self.slots = spec.slots
                self._threads = spec.threads or len(os.sched_getaffinity(0))
                self.n_ctx_per_slot = ll.llama_n_ctx_seq(self._ctx)
                self.model_id = spec.model_id
                n_batch = self._n_batch = ll.llama_n_batch(self._ctx)
                t3 = time.perf_counter()
                mmproj = spec.files.get("aux_path")
                if mmproj is not None:
                    from hypnos.engines.llama.mtmd import Projector
                    self._projector = Projector(
                        self._model, mmproj, spec.threads or len(os.sched_getaffinity(0)),
                        use_gpu=spec.gpu_layers != 0)
                t4 = time.perf_counter()
                self._spec, self._draft = build_speculation(
                    ll, self._model, self._vocab, spec, self.n_ctx_per_slot, n_batch,
                    spec.threads or len(os.sched_getaffinity(0)), ctx=self._ctx)
                self._loop = DecodeLoop(ll, self._ctx, self._vocab, spec.slots, n_batch,
                                        observer=self._spec.observer, drafts=self._draft,
                                        swa_full=self._swa_full,
                                        cache=self._attach_cache(spec))
            except BaseException:
                self._free_locked()
                raise
        mode = "warm" if warm else "read" if self.weights_read else "mmap"
        return LoadReport(load_mode=mode, weights_ms=(t1 - t0) * 1e3,
                          context_ms=(t2 - t1) * 1e3, projector_ms=(t4 - t3) * 1e3,
                          total_ms=(time.perf_counter() - t0) * 1e3)

    def unload(self) -> None:
        """Stop the decode thread and free sampler, context and model. Idempotent; any call
        still waiting gets an EngineError."""
        with self._lifecycle:
            self._free_locked()

    def release_context(self) -> bool:
        """Tier 2 where the engine computes from host memory: stop the decode thread and free
        the context (KV cache, compute buffers) and the projector, but keep the model (its
        weights loaded and repacked). The next ``load`` of the same weights with the same
        GPU layers then builds only a context (``LoadReport.load_mode`` "warm"). False when
        nothing is loaded. Whether kept weights are host memory is the caller's call (on a
        discrete GPU offloaded layers would hold VRAM). Blocks; must not overlap ``chat``."""
        with self._lifecycle:
            if self._model is None:
                return False
            self._free_locked(keep_model=True)
            return True

    @property
    def evaluated_positions(self) -> int:
        """Positions llama_decode evaluated since this context was built (prompt tokens
        not reused, and generated ones): what prefix reuse saves shows here."""
        loop = self._loop
        return loop.evaluated if loop is not None else 0

    @property
    def holds_weights(self) -> bool:
        """A model is loaded (with or without a context)."""
        return self._model is not None

    def _stash_slots(self, loop: DecodeLoop) -> None:
        """The slots' prefixes into the prompt cache before their context goes (blocks ~1 ms
        per MB); nothing without a cache or when the loop is already closed."""
        if loop.cache is None or loop.closing:
            return
        try:
            loop.call(loop.stash_all)
        except Exception:               # a context in trouble: its KV is not worth keeping
            log.exception("could not keep the slots' prefixes in the prompt cache")

    def _free_locked(self, keep_model: bool = False) -> None:
        if self._loop is not None:
            self._stash_slots(self._loop)
            self._loop.close()
            self._loop = None
        if self._projector is not None:
            self._projector.close()
            self._projector = None
        if self._draft is not None:
            self._draft.close()
            self._draft = None
        if self._ctx is not None:
            self._ll.llama_free(self._ctx)
            self._ctx = None
        self.layout = None
        if keep_model:
            return
        if self._model is not None:
            self._ll.llama_model_free(self._model)
            self._model = None
        self._model_key = None
        self._vocab = self._formatter = None
        self._template_key = None

    # ------------------------------------------------------------------ requests

    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` takes (no BOS/EOS added, special markers read as text)."""
        return len(self._tokenize(text, parse_special=False))

    def chat(self, req: ChatRequest, on_text: OnToken | None,
             cancel: threading.Event) -> ChatResult:
        """Generate one answer; see ``ChatEngine.chat``. Blocks in the caller's thread while
        the decode thread works; ``on_text`` runs in this thread."""
        t_call = time.perf_counter()
        loop = self._loop
        if loop is None:
            raise EngineError("model not loaded")
        built = self._build(req)
        prompt = built.prompt
        if len(prompt) >= self.n_ctx_per_slot:
            raise ContextOverflow(
                f"the prompt ({len(prompt)} tokens) does not fit the context of a slot "
                f"({self.n_ctx_per_slot} tokens)", len(prompt), self.n_ctx_per_slot)
        # Generation stops at the end of the slot's context (finish_reason "length").
        max_tokens = min(req.max_tokens, self.n_ctx_per_slot - len(prompt))
        sampling = Sampling(req.temperature, req.top_k, req.top_p, req.seed,
                            req.presence_penalty, req.frequency_penalty,
                            req.repetition_penalty, req.min_p, built.grammar,
                            tuple((req.logit_bias or {}).items()))
        if sampling.grammar:
            self._check_grammar(sampling.grammar)
        rules = JobRules(think=built.think, repetition_bound=req.repetition_bound)
        if built.splitter.forced and sampling.grammar:
            # A forced call ends as a whole call whenever its shortest form fits. Its closing
            # is tokenized as plain text, so the reader sees every character of it (a control
            # token would render as nothing).
            rules.closer = CallCloser.start(sampling.grammar,
                                            lambda text: self._tokenize(text, False), max_tokens)
        job = Job(prompt=prompt, max_tokens=max_tokens, sampling=sampling,
                  stop=threading.Event(), session_key=req.session_key,
                  session_yields=req.session_yields, tag=req.cache_tag,
                  logprobs=req.top_logprobs if req.logprobs else None, rules=rules,
                  prefill=built.prefill, group=req.group, events=TokenEvents(),
                  partition=req.partition, pause=req.pause)
        setup_job(job, self._spec, req, lambda text: self._tokenize(text, False))
        if req.cache_marks and loop.checkpointing:      # a checkpoint where each mark ends
            job.boundaries = prompts.mark_positions(req, prompt, self._build)
        # A forced call is the whole answer under its grammar: stop strings do not cut it.
        stops = [] if built.splitter.forced else req.stop
        reader = AnswerReader(built.splitter, StopMatcher(stops), on_text, req.logprobs)
        if self._cache is not None and prompt and len(prompt) >= self._cache.min_tokens:
            self._cache.fetch(req.partition, prompt)     # a disk entry read here, not there
        try:
            try:
                loop.submit(job)
            except RuntimeError as exc:
                raise EngineError("model unloaded") from exc
            finish, delivered = collect(loop, job, reader, cancel)
        finally:
            if built.chunks is not None:
                built.chunks.free()
        if reader.splitter.calls and finish in ("stop", "length"):
            finish = "tool_calls"
        elif built.splitter.forced and finish == "length":
            for error in reader.splitter.errors:
                error.message = (f"the forced call was cut at max_tokens ({req.max_tokens}) "
                                 f"before it closed; {error.message}")
        return ChatResult(text=reader.content, finish_reason=finish,
                          prompt_tokens=len(prompt), completion_tokens=delivered,
                          cached_tokens=job.cached, timings=timings(job, t_call),
                          reasoning=reader.reasoning, reasoning_tokens=reader.reasoning_tokens,
                          tool_calls=reader.splitter.calls,
                          tool_call_errors=reader.splitter.errors,
                          logprobs=reader.logprobs if req.logprobs else None,
                          kv_used=len(prompt) + delivered, kv_cap=self.n_ctx_per_slot,
                          response_format_status=built.format_status,
                          stop_sequence=reader.stopper.matched,
                          tool_call_truncated=job.rules.closed_call,
                          speculative=(job.drafting.stats.to_wire()
                                       if job.drafting is not None else None),
                          cached_from=job.cached_from or None, parting=job.parting)

    def prompt_tokens(self, req: ChatRequest) -> int:
        """Tokens the request's prompt takes, exactly as ``chat`` would send it (media
        included)."""
        built = self._build(req)
        if built.chunks is not None:
            built.chunks.free()
        return len(built.prompt)

    def _build(self, req: ChatRequest) -> prompts.Built:
        """The prompt tokens, the grammar, the thinking budget and the answer's reader."""
        return prompts.build(req, self.format, self._tokenize, self._render, self._bos,
                             self._bos_text, self._projector, self._n_batch)

    def _check_grammar(self, grammar: str) -> None:
        """Raise InvalidGrammar in the caller's thread, before the job takes a slot."""
        smpl = grammar_sampler(self._ll, self._vocab, grammar)
        if smpl is None:
            raise InvalidGrammar("the grammar is not valid GBNF with a 'root' rule")
        self._ll.llama_sampler_free(smpl)

    def rerank(self, req: RerankRequest, cancel: threading.Event) -> RerankResult:
        """Each document's relevance by this model's judgement (``judge``): p(yes) /
        (p(yes) + p(no)) after the rendered judging prompt. Runs in the caller's thread in
        a scratch context of at most one slot's size, freed after the call; the slots and
        the prompt cache are not touched. Rerank calls are serialised."""
        from hypnos.engines.llama import judge
        if self._loop is None:
            raise EngineError("model not loaded")
        prompts = []
        for i, doc in enumerate(req.documents):
            prompt = self._build(ChatRequest(
                messages=judge.judge_messages(req.query, doc, req.instruction))).prompt
            if len(prompt) >= self.n_ctx_per_slot:
                raise ContextOverflow(f"documents[{i}] in the judging prompt is "
                                      f"{len(prompt)} tokens; a slot of this model holds "
                                      f"{self.n_ctx_per_slot}", len(prompt),
                                      self.n_ctx_per_slot)
            prompts.append(prompt)
        answers = judge.answer_tokens(lambda text: self._tokenize(text, False))
        with self._judging:
            scores, evaluated = on_own_thread(lambda: judge.judge(     # compute_threads
                self._ll, self._model, prompts, answers, cap=self.n_ctx_per_slot,
                n_batch=self._n_batch, threads=self._threads, cancel=cancel), "llama-judge")
        return RerankResult(scores=scores, prompt_tokens=evaluated)

    # ------------------------------------------------------------------ prompt

    def render_prompt(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        """The chat template applied to ``messages`` (with the generation prompt), as tokens."""
        return self._build(ChatRequest(messages=messages, tools=tools)).prompt

    def _render(self, messages: list[dict], tools: list[dict] | None, variables: dict) -> str:
        if self._formatter is None:
            raise NoChatTemplate(self._no_template or "the model has no chat template")
        marker = self._projector.marker if self._projector is not None else None
        return prompts.render(self._formatter, messages, tools, variables, marker)

    def _tokenize(self, text: str, parse_special: bool) -> list[int]:
        return prompts.tokenize(self._ll, self._vocab, text, parse_special)
