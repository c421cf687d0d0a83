"""Drafts from the target's own MTP heads (``nextn`` layers), through llama.cpp's staging
API (``llama_cpp.llama_cpp_ext``, ``src/llama-ext.h``: not llama.cpp's stable API).

How llama.cpp runs an MTP head (facts of the vendored llama.cpp; the head of Qwen3.5/3.6/3.8,
Qwen3-Next, GLM-4 MoE, Nemotron-H MoE, MiMo 2, Step 3.5 ...):

- The GGUF appends ``<arch>.nextn_predict_layers`` blocks after the trunk (``block_count``
  counts both): each is one decoder block plus ``blk.N.nextn.{eh_proj, enorm, hnorm}`` and
  optionally its own ``embed_tokens``, ``shared_head_head`` and ``shared_head_norm`` (else
  the model's). A head may also come as a separate, MTP-only GGUF of the same architecture
  (no trunk blocks: Qwen3.8's ``mtp-*.gguf``). llama.cpp loads these tensors only when the
  model is loaded with ``llama_model_params.load_mtp``; building an MTP context over a model
  loaded without it aborts the process (a GGML_ASSERT), so the caller must set it.
- The target context, with ``llama_set_embeddings_nextn(target, True, masked=False)``,
  keeps for every batch row its last hidden state after the output norm
  (``llama_get_embeddings_nextn``: n_rows x n_embd floats, batch order).
- A second context over the same (or the MTP-only) model, created with
  ``ctx_type = LLAMA_CONTEXT_TYPE_MTP`` and ``ctx_other`` = the target context, runs the
  head: it takes a token *and* an embedding per row (a ``llama_batch`` with both arrays),
  norms the token embedding (``enorm``) and the target's hidden state of the previous
  position (``hnorm``), projects their concatenation (``eh_proj``), runs the block with its
  own KV cache, and gives logits for the token after next plus its own hidden state
  (``llama_get_embeddings_nextn_ith``, with ``masked=True``: output rows only), which feeds
  the next draft step. Where llama.cpp links the MTP context to the target's memory instead
  (``llama_get_ctx_other(mtp) == target``), it keeps no KV of its own: Gemma 4's separate
  ``gemma4-assistant`` head (narrower inside, ``embedding_length_out`` = the target's width;
  ``nextn.pre_projection`` in, ``nextn.post_projection`` out) attends with queries only over
  the target's KV, so every draft step sits at the same position and nothing is cut.
- Drafting k tokens is k decodes of the MTP context (one row per drafting slot) at
  consecutive positions; the
  drafted rows are then cut from its KV (``llama_memory_seq_rm``), and the rows the target
  verifies are fed again with the target's real hidden states. A rejected tail is cut from
  both KVs at the same position.

``MtpDrafter`` contract (for the decode loop; every method runs on the decode thread, the
one that calls ``llama_decode`` on the target, and blocks on the MTP context's decodes):

1. after every target ``llama_decode``: ``observe(tokens, positions, seq_ids)`` with the
   batch's rows in order (or ``observe_batch(batch, n)``);
2. to draft for a slot: ``propose(seq, tokens, n_max)``, ``tokens`` being the slot's whole
   token list whose last token was sampled by the target and is not decoded yet; returns
   up to ``n_max`` token ids (``[]`` when it cannot draft: see ``can_draft``);
   ``propose_many`` drafts for every slot at once, one MTP decode per draft step;
3. whenever the target's KV of a sequence is cut at ``keep`` (a rejected draft tail, a
   reused prefix, a new job with ``keep = 0``): ``rollback(seq, keep)``. Optional where the
   next call is ``observe`` or ``propose`` with the cut context: ``observe`` cuts stale MTP
   rows at the positions it feeds, ``propose`` cuts to ``len(tokens) - 1``.

``for_seq(seq)`` gives the per-sequence view the decode loop's ``Drafter`` protocol
(``speculative/__init__.py`` on the spec branch: ``method``, ``propose(context, n_max)``,
``on_accept``, ``close``) asks for, as a ``DraftSource``.

A KV restored from outside (a parked slot, an imported session) has no MTP rows: the MTP KV
then holds a hole there (attention skips it), and drafts are worse, never wrong.

A recurrent or hybrid target (qwen35 is hybrid) can roll back only with retained
recurrent-state snapshots: its context needs ``n_rs_seq >= n_max`` (the target's business,
not this module's). Multi-block heads draft with their first block only.
"""
from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hypnos.engines.errors import EngineError, MtpUnavailable
from hypnos.engines.llama.speculative import Batched, Plan
from hypnos.engines.llama.speculative.mtp_state import SeqState, group_rows, plan_feed


def enable_mtp_loading(params) -> None:
    """Set ``load_mtp`` on a ``llama_model_params`` (required before ``MtpDrafter``)."""
    params.load_mtp = True


def no_heads_message(model_id: str, what: str = "its GGUF") -> str:
    return (f"{model_id}: speculative = \"mtp\" needs MTP heads, and {what} has no nextn "
            "layers (<arch>.nextn_predict_layers is absent or 0); use another speculative "
            "method or a GGUF that carries them")


def require_mtp_heads(meta, model_id: str) -> None:
    """Config-time check on a ``gguf_meta.GgufMeta``: raises MtpUnavailable when the file has
    no nextn layers. Pure (reads the header facts only)."""
    if not meta.has_mtp_heads:
        raise MtpUnavailable(no_heads_message(model_id, meta.path.name))


def require_nextn(ll, model, model_id: str) -> int:
    """The loaded model's MTP block count; raises MtpUnavailable when it has none."""
    n = int(ll.llama_model_n_layer_nextn(model))
    if n <= 0:
        raise MtpUnavailable(no_heads_message(model_id))
    return n


def open_mtp(ll, model, target_ctx, *, model_id: str, mtp_path=None, gpu_layers: int = 0,
             **context) -> MtpDrafter:
    """The engine's ``MtpDrafter`` over ``target_ctx``: with the heads of ``model`` itself, or
    of the separate MTP-only GGUF at ``mtp_path`` (loaded here with ``load_mtp``, freed by the
    drafter's ``close``). ``context``: ``MtpDrafter``'s sizes (``n_seq_max``, ``n_ctx``,
    ``n_threads``, ``n_batch``). Raises MtpUnavailable (no nextn layers, widths differ) or
    EngineError (llama.cpp refused the file or the context)."""
    head = None
    if mtp_path is not None:
        params = ll.llama_model_default_params()
        params.n_gpu_layers = gpu_layers
        enable_mtp_loading(params)
        head = ll.llama_model_load_from_file(str(mtp_path).encode(), params)
        if not head:
            raise EngineError(f"{model_id}: llama.cpp refused the MTP file {mtp_path}")
    try:
        drafter = MtpDrafter(ll, model, target_ctx, mtp_model=head, model_id=model_id,
                             **context)
    except BaseException:
        if head is not None:
            ll.llama_model_free(head)
        raise
    drafter.own_model = head
    return drafter


class MtpDrafter:
    """An MTP context linked to ``target_ctx``; see the module docstring for the contract.

    ``ll`` is ``llama_cpp.llama_cpp``; ``model`` the target's (loaded with ``load_mtp``);
    ``mtp_model`` a separate MTP-only GGUF's model if the heads come apart (same loading).
    ``n_ctx``/``n_seq_max`` as the target's context; ``n_batch``: rows per MTP decode (the
    target's n_batch feeds a prompt chunk in one); ``n_threads`` as the target's.
    Raises MtpUnavailable when the model has no nextn layers or widths differ, EngineError
    when llama.cpp refuses the context. ``close`` frees it (the models stay the caller's).
    """

    def __init__(self, ll, model, target_ctx, *, n_seq_max: int, n_ctx: int,
                 n_threads: int, n_batch: int = 64, mtp_model=None, p_min: float = 0.0,
                 model_id: str = "model"):
        from llama_cpp import llama_cpp_ext
        self.ll, self.ext, self.target_ctx, self.p_min = ll, llama_cpp_ext, target_ctx, p_min
        self.own_model = None           # a separate head's model, freed by ``close``
        self.decodes = 0                # MTP llama_decode calls (observe's and the drafts')
        head = mtp_model or model
        self.n_heads = require_nextn(ll, head, model_id)
        self.n_embd = int(ll.llama_model_n_embd(model))
        # A separate head may be narrower inside (Gemma 4's assistant) but must take and give
        # hidden states of the target's width.
        width = int(ll.llama_model_n_embd_out(head)) or int(ll.llama_model_n_embd(head))
        if width != self.n_embd:
            raise MtpUnavailable(f"{model_id}: the MTP model's hidden states are {width} wide, "
                                 f"the target's {self.n_embd}")
        self.n_vocab = int(ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(model)))
        self.ctx = ll.llama_init_from_model(head, self._params(
            n_seq_max=n_seq_max, n_ctx=n_ctx, n_threads=n_threads, n_batch=n_batch))
        if not self.ctx:
            raise EngineError(f"{model_id}: llama.cpp could not build the MTP context")
        other = llama_cpp_ext.llama_get_ctx_other(self.ctx)
        self.shares_memory = bool(other) and other == target_ctx
        self.mem = ll.llama_get_memory(self.ctx)
        self.n_batch = n_batch
        self.batch = ll.llama_batch_init(n_batch, self.n_embd, 1)
        self._tokens = (ll.llama_token * n_batch)()
        self.batch.token = self._tokens          # token and embedding per row
        self._embd = np.ctypeslib.as_array(self.batch.embd, shape=(n_batch, self.n_embd))
        self.states = [SeqState(self.n_embd) for _ in range(n_seq_max)]
        llama_cpp_ext.llama_set_embeddings_nextn(self.ctx, True, True)
        llama_cpp_ext.llama_set_embeddings_nextn(target_ctx, True, False)

    def _params(self, *, n_seq_max: int, n_ctx: int, n_threads: int, n_batch: int):
        ll = self.ll
        params = ll.llama_context_default_params()
        params.n_ctx, params.n_seq_max = n_ctx, n_seq_max
        params.n_batch = params.n_ubatch = n_batch
        params.n_threads = params.n_threads_batch = n_threads
        params.n_rs_seq = 0
        params.kv_unified = False               # per-sequence cells, as the target's
        params.no_perf = True
        params.ctx_type = ll.LLAMA_CONTEXT_TYPE_MTP
        params.ctx_other = self.target_ctx
        return params

    # ------------------------------------------------------------------ the contract

    def observe(self, tokens: Sequence[int], positions: Sequence[int],
                seq_ids: Sequence[int]) -> None:
        """Feed the MTP context the rows the target just decoded (batch order). Raises
        EngineError when the target kept no nextn embeddings or the MTP decode fails."""
        n = len(tokens)
        if n == 0:
            return
        ptr = self.ext.llama_get_embeddings_nextn(self.target_ctx)
        if not ptr:
            raise EngineError("the target context kept no nextn embeddings for MTP")
        hidden = np.ctypeslib.as_array(ptr, shape=(n, self.n_embd))
        toks = list(tokens)
        for group in group_rows(list(seq_ids), list(positions)):
            state = self.states[group.seq]
            if not self.shares_memory:
                cut, rows = plan_feed(state, group, toks, hidden)
                if cut is not None:
                    self._cut(group.seq, cut)
                for start in range(0, len(rows), self.n_batch):
                    chunk = rows[start:start + self.n_batch]
                    self._fill([(r.token, r.pos, r.seq, r.hidden) for r in chunk], logits=False)
                    self._decode()
            state.decoded(group.positions, hidden[group.indices])

    def observe_batch(self, batch, n_tokens: int) -> None:
        """``observe`` reading the target's ``llama_batch`` (one sequence id per row)."""
        self.observe([batch.token[i] for i in range(n_tokens)],
                     [batch.pos[i] for i in range(n_tokens)],
                     [batch.seq_id[i][0] for i in range(n_tokens)])

    def can_draft(self, seq: int, n_tokens: int) -> bool:
        """Whether ``propose`` can draft for a sequence holding ``n_tokens`` tokens (the last
        one not yet decoded): the MTP state must stand at that token's position."""
        state = self.states[seq]
        return state.ready and state.ready_pos == n_tokens - 1

    def propose(self, seq: int, tokens: Sequence[int], n_max: int) -> list[int]:
        """Up to ``n_max`` drafted token ids following ``tokens`` (greedy over the head's
        logits; a step whose best probability is under ``p_min`` ends the draft). A
        ``tokens`` shorter than what was observed means the target's KV was cut there: the
        MTP KV is cut too (``rollback``), so a caller that cuts only the target's KV still
        drafts right. Leaves the MTP KV as it found it otherwise. Raises EngineError when an
        MTP decode fails."""
        return self.propose_many([(seq, tokens, n_max)])[0]

    def propose_many(self, requests: Sequence[tuple[int, Sequence[int], int]]
                     ) -> list[list[int]]:
        """``propose`` for several sequences (distinct ids) at once, in request order: each
        draft step is one MTP decode carrying a row for every sequence still drafting, as
        the target's batch carries every slot."""
        if len(requests) > self.n_batch:
            return (self.propose_many(requests[:self.n_batch])
                    + self.propose_many(requests[self.n_batch:]))
        drafts: list[list[int]] = [[] for _ in requests]
        live = [_Draft(i, seq, self.states[seq].ready_pos, n_max, int(tokens[-1]),
                       self.states[seq].pending)
                for i, (seq, tokens, n_max) in enumerate(requests)
                if self._align(seq, tokens) and n_max > 0]
        cuts = [(d.seq, d.first) for d in live]
        try:
            step = 0
            while live:
                self._fill([(d.token, d.first if self.shares_memory else d.first + step,
                             d.seq, d.hidden) for d in live], logits=True)
                self._decode()
                live = [d for row, d in enumerate(live) if self._extend(d, row, drafts[d.index])]
                step += 1
        finally:
            if not self.shares_memory:
                for seq, first in cuts:
                    self._cut(seq, first)
        return drafts

    def _align(self, seq: int, tokens: Sequence[int]) -> bool:
        """Follow a cut of the target's KV to ``len(tokens) - 1``; whether it can draft."""
        state, past = self.states[seq], len(tokens) - 1
        if past >= 0 and (state.kv_len > past or (state.ready and state.ready_pos > past)):
            self.rollback(seq, past)
        return bool(tokens) and self.can_draft(seq, len(tokens))

    def _extend(self, d: _Draft, row: int, out: list[int]) -> bool:
        """Read output ``row`` of the last MTP decode into ``out``; whether ``d`` drafts on."""
        token = self._pick(row)
        if token is None:
            return False
        out.append(token)
        if len(out) >= d.n_max:
            return False
        d.token, d.hidden = token, self._own_hidden(row)
        return True

    def rollback(self, seq: int, keep: int) -> None:
        """The target's KV of ``seq`` was cut at ``keep``: cut the MTP KV there too."""
        if not self.shares_memory:
            self._cut(seq, keep)
        self.states[seq].rollback(keep)

    def for_seq(self, seq: int) -> MtpSeqDrafter:
        """The ``Drafter`` of one sequence (the slot ``seq``)."""
        return MtpSeqDrafter(self, seq)

    def kv_len(self, seq: int) -> int:
        """Positions the MTP KV holds for ``seq`` (llama.cpp's own count)."""
        return int(self.ll.llama_memory_seq_pos_max(self.mem, seq)) + 1

    def close(self) -> None:
        """Free the MTP context and stop the target keeping nextn embeddings."""
        if self.ctx is None:
            return
        self.ext.llama_set_embeddings_nextn(self.target_ctx, False, False)
        self.batch.token = ctypes.POINTER(self.ll.llama_token)()   # ours, not the batch's
        self.ll.llama_batch_free(self.batch)
        self.ll.llama_free(self.ctx)
        self.ctx = None
        if self.own_model is not None:
            self.ll.llama_model_free(self.own_model)
            self.own_model = None

    # ------------------------------------------------------------------ llama.cpp

    def _fill(self, rows: list[tuple[int, int, int, np.ndarray]], *, logits: bool) -> None:
        b = self.batch
        for i, (token, pos, seq, hidden) in enumerate(rows):
            b.token[i], b.pos[i], b.n_seq_id[i] = token, pos, 1
            b.seq_id[i][0] = seq
            b.logits[i] = logits
            self._embd[i] = hidden
        b.n_tokens = len(rows)

    def _decode(self) -> None:
        rc = self.ll.llama_decode(self.ctx, self.batch)
        self.decodes += 1
        if rc != 0:
            raise EngineError(f"the MTP context's llama_decode failed ({rc})")

    def _cut(self, seq: int, keep: int) -> None:
        self.ll.llama_memory_seq_rm(self.mem, seq, keep, -1)
        self.states[seq].kv_len = min(self.states[seq].kv_len, keep)

    def _pick(self, row: int) -> int | None:
        logits = np.ctypeslib.as_array(self.ll.llama_get_logits_ith(self.ctx, row),
                                       shape=(self.n_vocab,))
        best = int(np.argmax(logits))
        if self.p_min > 0.0:
            top = 1.0 / float(np.sum(np.exp(logits - logits[best])))
            if top < self.p_min:
                return None
        return best

    def _own_hidden(self, row: int) -> np.ndarray:
        ptr = self.ext.llama_get_embeddings_nextn_ith(self.ctx, row)
        if not ptr:
            raise EngineError("the MTP context kept no nextn embedding")
        return np.ctypeslib.as_array(ptr, shape=(self.n_embd,)).copy()


@dataclass
class _Draft:
    """One sequence's draft in progress (``propose_many``): request ``index``, where its
    draft starts, its length cap, and the next row's token and hidden state."""
    index: int
    seq: int
    first: int
    n_max: int
    token: int
    hidden: np.ndarray


class MtpSeqDrafter:
    """One sequence's view of an ``MtpDrafter``, shaped as the decode loop's ``Drafter``:
    ``propose(context, n_max)`` with ``context`` = the slot's tokens plus its pending one.
    ``close`` frees nothing (the engine closes the shared ``MtpDrafter``)."""

    method = "mtp"

    def __init__(self, drafter: MtpDrafter, seq: int):
        self.drafter, self.seq = drafter, seq

    def propose(self, context: list[int], n_max: int) -> list[int]:
        return self.drafter.propose(self.seq, context, n_max)

    def plan(self, context: list[int], n_max: int) -> Plan:
        """A batched ask: the decode loop drafts every slot at once through
        ``MtpDrafter.propose_many``."""
        return [], Batched(self.drafter, self.seq, n_max)

    def on_accept(self, drafted: int, accepted: int, step_s: float = 0.0) -> None:
        pass                        # the next propose cuts the rejected rows

    def close(self) -> None:
        pass
