"""A draft model: a small llama model of the target's vocabulary that drafts greedily.

``DraftModel`` owns its own model and context, with one KV sequence per target slot
(``seq_id`` = the slot's), and remembers the tokens each holds. ``DraftSeq`` is the
``Drafter`` of one sequence: ``propose`` first brings the draft's KV to the context (it keeps
the common prefix, so the tail of a rejected draft is rolled back there and the target's
accepted tokens are added), then decodes up to ``n_max`` tokens one by one, taking the
argmax each time and stopping early when the draft's own top probability falls under
``P_MIN`` (a guess the target would likely refuse costs a verified position for nothing).
``DraftModel.propose_many`` does that for every drafting slot at once (the decode loop's
way, ``speculative.BatchDrafter``): one draft decode per draft step, a row per slot. Decode
thread only. ``check_vocab`` refuses a draft whose tokens are not the target's.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hypnos.engines.devices import llama_backend
from hypnos.engines.errors import EngineError
from hypnos.engines.llama.cpu import reads_weights
from hypnos.engines.llama.slots import common_prefix
from hypnos.engines.llama.speculative import Batched, Plan
from hypnos.engines.llama.speculative.shared_weights import DRAFT_WEIGHTS

#: Stop drafting when the draft model's top probability is below this.
P_MIN = 0.6
#: Token texts compared between draft and target (spread over the vocabulary).
VOCAB_SAMPLE = 512


def check_vocab(ll, target_vocab, draft_vocab, draft_id: str) -> None:
    """Raise EngineError unless the draft has the target's vocabulary: the same size, the same
    BOS / EOS / EOT ids and the same text for a sample of tokens."""
    n = ll.llama_vocab_n_tokens(target_vocab)
    m = ll.llama_vocab_n_tokens(draft_vocab)
    if n != m:
        raise EngineError(f"speculative draft {draft_id}: its vocabulary has {m} tokens, the "
                          f"target's {n}; a draft must share the target's vocabulary")
    for name in ("bos", "eos", "eot"):
        a = getattr(ll, f"llama_vocab_{name}")(target_vocab)
        b = getattr(ll, f"llama_vocab_{name}")(draft_vocab)
        if a != b:
            raise EngineError(f"speculative draft {draft_id}: its {name.upper()} token is {b}, "
                              f"the target's {a}; a draft must share the target's vocabulary")
    for tok in range(0, n, max(1, n // VOCAB_SAMPLE)):
        if ll.llama_vocab_get_text(target_vocab, tok) != ll.llama_vocab_get_text(draft_vocab,
                                                                                 tok):
            raise EngineError(f"speculative draft {draft_id}: token {tok} differs from the "
                              "target's; a draft must share the target's vocabulary")


class DraftModel:
    """Loads the draft (blocks) with a context of ``n_slots`` sequences of ``n_ctx_seq``
    tokens. Raises EngineError when llama.cpp refuses it or its vocabulary differs."""

    def __init__(self, ll, path, draft_id: str, target_vocab, n_slots: int, n_ctx_seq: int,
                 threads: int, n_batch: int, gpu_layers: int = 0, extra_bufts: bool = True):
        self.ll, self.draft_id, self.n_batch = ll, draft_id, n_batch
        params = ll.llama_model_default_params()
        params.n_gpu_layers = gpu_layers
        # Read into memory where the target's are (``cpu.reads_weights``): a draft decodes
        # a token at a time, where the mapped file's small pages cost the most.
        params.load_mode = ll.LLAMA_LOAD_MODE_NONE if reads_weights(llama_backend()) \
            else ll.LLAMA_LOAD_MODE_MMAP
        params.use_extra_bufts = extra_bufts      # the target's (see ``cpu``)
        # One load per process, whatever the number of targets drafting with it.
        self.model = DRAFT_WEIGHTS.acquire(
            DRAFT_WEIGHTS.key(path, gpu_layers, extra_bufts),
            lambda: ll.llama_model_load_from_file(str(path).encode(), params))
        if not self.model:
            raise EngineError(f"speculative draft {draft_id}: llama.cpp refused {path}")
        self.ctx = None
        try:
            self.vocab = ll.llama_model_get_vocab(self.model)
            check_vocab(ll, target_vocab, self.vocab, draft_id)
            cp = ll.llama_context_default_params()
            cp.n_ctx, cp.n_seq_max = n_ctx_seq * n_slots, n_slots
            cp.n_batch = cp.n_ubatch = n_batch
            cp.n_threads = cp.n_threads_batch = threads
            cp.kv_unified, cp.no_perf = False, True
            self.ctx = ll.llama_init_from_model(self.model, cp)
            if not self.ctx:
                raise EngineError(f"speculative draft {draft_id}: no context of "
                                  f"{n_ctx_seq} x {n_slots} tokens")
        except BaseException:
            self.close()
            raise
        self.mem = ll.llama_get_memory(self.ctx)
        self.n_vocab = ll.llama_vocab_n_tokens(self.vocab)
        self.tokens: list[list[int]] = [[] for _ in range(n_slots)]
        self.batch = ll.llama_batch_init(n_batch, 0, 1)
        self.decodes = 0        # llama_decode calls, and the most sequences one carried
        self.widest = 0

    def for_seq(self, seq_id: int) -> DraftSeq:
        return DraftSeq(self, seq_id)

    def draft(self, seq_id: int, context: list[int], n_max: int) -> list[int]:
        return self.propose_many([(seq_id, context, n_max)])[0]

    def propose_many(self, requests: Sequence[tuple[int, Sequence[int], int]]
                     ) -> list[list[int]]:
        """The drafts of ``requests`` (seq_id, context, n_max; distinct sequences), in order:
        each sequence's KV is first brought to its context (common prefix kept), then every
        draft step is one ``llama_decode`` with a row per sequence still drafting (the first
        also carries each sequence's catch-up tail, unless the tails overflow a batch), each
        stopping at its own ``n_max``, ``P_MIN`` or an end-of-generation token. Raises
        EngineError when a decode fails."""
        if len(requests) > self.n_batch:
            return (self.propose_many(requests[:self.n_batch])
                    + self.propose_many(requests[self.n_batch:]))
        drafts: list[list[int]] = [[] for _ in requests]
        live = [(i, seq, self._catch_up(seq, list(context)), n)
                for i, (seq, context, n) in enumerate(requests) if n > 0 and context]
        if sum(len(tail) for _, _, tail, _ in live) > self.n_batch:
            rows = [(seq, t, False) for _, seq, tail, _ in live for t in tail[:-1]]
            for start in range(0, len(rows), self.n_batch):
                self._decode(rows[start:start + self.n_batch])
            live = [(i, seq, tail[-1:], n) for i, seq, tail, n in live]
        while live:
            rows, last = [], []
            for _, seq, tail, _ in live:
                rows += [(seq, t, j == len(tail) - 1) for j, t in enumerate(tail)]
                last.append(len(rows) - 1)
            self._decode(rows)
            going = []
            for (i, seq, _, n_max), row in zip(live, last, strict=True):
                token, p_top = self._argmax(row)
                if p_top < P_MIN or self.ll.llama_vocab_is_eog(self.vocab, token):
                    continue
                drafts[i].append(token)
                if len(drafts[i]) < n_max:
                    going.append((i, seq, [token], n_max))
            live = going
        return drafts

    def _catch_up(self, seq_id: int, context: list[int]) -> list[int]:
        """Cut the sequence's KV to its common prefix with ``context``; returns the tokens
        left to decode (at least the last one, whose logits start the draft)."""
        held = self.tokens[seq_id]
        keep = min(common_prefix(held, context), len(context) - 1)
        if not self.ll.llama_memory_seq_rm(self.mem, seq_id, keep, -1):
            self.ll.llama_memory_seq_rm(self.mem, seq_id, -1, -1)
            keep = 0
        del held[keep:]
        return context[keep:]

    def rollback(self, seq_id: int, keep: int) -> None:
        """Cut the sequence's KV and token list at ``keep`` (0: empty it)."""
        held = self.tokens[seq_id]
        if not self.ll.llama_memory_seq_rm(self.mem, seq_id, keep, -1):
            self.ll.llama_memory_seq_rm(self.mem, seq_id, -1, -1)
            keep = 0
        del held[keep:]

    def _decode(self, rows: list[tuple[int, int, bool]]) -> None:
        """One ``llama_decode`` of ``rows`` (seq_id, token, logits wanted), each appended to
        its sequence in order. Raises EngineError (its sequences cleared) when it fails."""
        batch, placed = self.batch, dict.fromkeys((seq for seq, _, _ in rows), 0)
        for n, (seq_id, token, logits) in enumerate(rows):
            batch.token[n], batch.pos[n] = token, len(self.tokens[seq_id]) + placed[seq_id]
            batch.n_seq_id[n], batch.seq_id[n][0] = 1, seq_id
            batch.logits[n] = int(logits)
            placed[seq_id] += 1
        batch.n_tokens = len(rows)
        rc = self.ll.llama_decode(self.ctx, batch)
        self.decodes += 1
        self.widest = max(self.widest, len(placed))
        if rc != 0:
            for seq_id in placed:
                self.ll.llama_memory_seq_rm(self.mem, seq_id, -1, -1)
                self.tokens[seq_id].clear()
            raise EngineError(f"speculative draft {self.draft_id}: llama_decode returned {rc}")
        for seq_id, token, _ in rows:
            self.tokens[seq_id].append(token)

    def _argmax(self, row: int = -1) -> tuple[int, float]:
        logits = np.ctypeslib.as_array(self.ll.llama_get_logits_ith(self.ctx, row),
                                       shape=(self.n_vocab,))
        token = int(logits.argmax())
        return token, float(1.0 / np.exp(logits - logits[token]).sum())

    def close(self) -> None:
        """Free the context and let go of the model (freed with its last user). Idempotent."""
        if getattr(self, "batch", None) is not None:
            self.ll.llama_batch_free(self.batch)
            self.batch = None
        if self.ctx:
            self.ll.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            DRAFT_WEIGHTS.release(self.model, self.ll.llama_model_free)
            self.model = None


class DraftSeq:
    """The ``Drafter`` of one target slot: its sequence in the draft model."""

    method = "draft"

    def __init__(self, model: DraftModel, seq_id: int):
        self.model, self.seq_id = model, seq_id

    def propose(self, context: list[int], n_max: int) -> list[int]:
        return self.model.draft(self.seq_id, context, n_max) if n_max > 0 else []

    def plan(self, context: list[int], n_max: int) -> Plan:
        """A batched ask: the decode loop drafts every slot at once through
        ``DraftModel.propose_many``."""
        return [], Batched(self.model, self.seq_id, n_max)

    def on_accept(self, drafted: int, accepted: int, step_s: float = 0.0) -> None:
        pass

    def close(self) -> None:
        pass                    # the sequence stays for the slot's next job (prefix reuse)
