"""Drafters without a model: ``NgramDrafter`` (prompt lookup over the prompt and the answer
so far) and ``PredictionDrafter`` (OpenAI Predicted Outputs: the caller's guess of the answer).
Both are deterministic (a point-mass draft), and both are pure: token lists in, tokens out.
"""
from __future__ import annotations

from collections.abc import Callable

from hypnos.engines.llama.speculative import Plan
from hypnos.engines.llama.speculative.copy_trail import CopyTrail
from hypnos.engines.llama.speculative.ngram_index import (ANCHOR_MIN, MATCH_CAP, MATCH_MIN,
                                                          NgramIndex, agreed, before_control)
from hypnos.engines.llama.speculative.respelled import RESPELLED_MIN, RespelledIndex

#: The draft is this many times the match's length (a copy that has held for m tokens is
#: likely to hold for a while longer), at most the configured ``n_max``.
DRAFT_PER_MATCH = 2
#: ... and at most the lookup's window: this long for a job's first draft and after a
#: refused one, twice as long after each draft taken whole (up to ``n_max``). A drafted
#: position costs a CPU a good part of a step (Qwen2.5-Coder-0.5B on 2 cores: a batch of 4
#: costs 1.6 plain steps, 16 cost 3.7, 64 cost 10.7), so a guess that fails must be short,
#: while a copy that holds is drafted long within a few steps.
LOOKUP_WINDOW, LOOKUP_WINDOW_MAX = 4, 64
#: A job whose recent drafts were mostly refused (the running share of accepted drafted
#: tokens under ``FLOOR``) needs twice the match before it drafts again.
FLOOR, FLOOR_WEIGHT = 0.5, 0.5
#: A prediction drafts this many tokens after a refusal (and at first), twice as many after
#: each draft taken whole, up to the ``n_max`` it runs with: a prediction that holds drafts
#: long within a few steps, one the answer leaves costs a few positions a step, not 32.
PREDICTION_WINDOW, PREDICTION_WINDOW_MAX = 8, 64
#: The shortest and longest suffix the prediction drafter matches (longest tried first).
NGRAM_MAX, NGRAM_MIN = 3, 1


class AnswerPool:
    """The answers a model wrote lately for one partition (one key's requests), each after
    the last ``MATCH_CAP`` tokens of its prompt (at most ``POOL_TOKENS`` tokens, the oldest
    dropped first), indexed for prompt lookup: a request asked again drafts the old answer
    from its first token, and another turn over the same file drafts from what was written
    before although it is not in its own context. Only that partition's requests draft from
    it (``choose.Speculation.of``): what another key's answer says never shows in a draft.
    Decode thread only (drafters add to it as their jobs end)."""

    def __init__(self, match_min: int = MATCH_MIN):
        self.index = NgramIndex(match_min)
        self.generation = 0                 # counts the times its positions moved

    def add(self, answer: list[int]) -> None:
        if len(answer) <= self.index.n:
            return
        index = self.index
        if len(index.tokens) + len(answer) > POOL_TOKENS:
            keep = index.tokens[len(index.tokens) // 2:]
            self.generation += 1
            self.index = index = NgramIndex(index.n)
            index.tokens = keep
        index.tokens.extend([SEPARATOR, *answer])      # no n-gram spans two answers
        index._index_new()

    def continuation(self, context: list[int], need: int, n_max: int,
                     near: int | None = None) -> tuple[int, list[int], int]:
        """(match length, draft, where the draft starts in the pool) for ``context``'s
        suffix: ``n_max`` at most, twice the match, never past the answer it is in;
        (0, [], -1) under ``need`` or ``POOL_MATCH_MIN``. ``near``: where in the pool the
        answer this job was following would go on (``NgramDrafter``); a match from
        ``RESYNC_BACK`` before it to ``RESYNC_AHEAD`` after it, in the same answer, needs only
        ``need`` tokens: the job's answer left that one for a few words and came back."""
        m, start = self.index.longest_match(context)
        if m < need or start < 0:
            return 0, [], -1
        toks = self.index.tokens
        if m < POOL_MATCH_MIN and not (
                near is not None and near - RESYNC_BACK <= start <= near + RESYNC_AHEAD
                and SEPARATOR not in toks[min(start, near):max(start, near)]):
            return 0, [], -1
        draft = toks[start:start + min(n_max, DRAFT_PER_MATCH * m)]
        if SEPARATOR in draft:
            draft = draft[:draft.index(SEPARATOR)]
        return m, draft, start


#: One partition's ``AnswerPool`` holds this many tokens at most.
POOL_TOKENS = 16384
#: A draft from the pool needs this long a match: the end of a chat template alone (about
#: 5 tokens before every answer) must not draft the start of some other answer.
POOL_MATCH_MIN = 12
SEPARATOR = -1                      # between two answers in the pool: never a token
#: A job that was drafting an earlier answer and left it (its own answer differs for a few
#: words: a question asked again, answered with other batch shapes, tips differently at a
#: near tie) takes it up again on a match of ``MATCH_MIN`` tokens, not ``POOL_MATCH_MIN``,
#: where the match lies this far before or after the place it left (same answer only).
RESYNC_BACK, RESYNC_AHEAD = 8, 64
#: A match this long wins over resuming a copy past an edit (``CopyTrail``): the copy was
#: found again. A shorter one (` 8081` in an instruction to set the port to 8081) loses.
EDIT_MATCH = 2 * MATCH_MIN


class NgramDrafter:
    """Prompt lookup: where the context's last tokens (at least ``MATCH_MIN``) occurred
    before (in the context, else in the model's recent answers: ``pool``), the tokens that
    followed there are the draft, twice as many as matched (at most ``n_max``, and the
    window: ``LOOKUP_WINDOW``); where they occurred at several places, only what all of them
    agree on (``agreed``). Without such a match, a record's end drafts what followed the
    last one's (``NgramIndex.gapped_matches``, an anchor of ``ANCHOR_MIN``), and, given the
    vocabulary's ``spelling``, a value copied from the prompt without its space drafts the
    rest of it (``respelled.RespelledIndex``). Where the answer has just left a copy of its
    context (an edit), the source past the edit is drafted first (``copy_trail.CopyTrail``)
    unless a long match says the copy was found again. No draft crosses one of
    ``controls`` (the chat template's message markers: a copy of the prompt's last message
    ends where that message did). Pays where
    the answer repeats its input or an earlier answer (code edits, quotes, structured output,
    a question asked again) and, by the length floor, drafts almost nowhere else. Its
    answer joins the pool when its job ends, after its prompt's last ``MATCH_CAP`` tokens."""

    method = "ngram"

    def __init__(self, match_min: int = MATCH_MIN, pool: AnswerPool | None = None,
                 prompt_len: int = 0, spelling: Callable[[int], int] | None = None,
                 controls: frozenset[int] = frozenset()):
        self.index = NgramIndex(match_min)
        self.controls = controls
        self.pool, self.prompt_len = pool, prompt_len
        self.respelled = (RespelledIndex(spelling, prompt_len) if spelling is not None
                          else None)
        self.share = 1.0                    # running share of drafted tokens accepted
        self.window = LOOKUP_WINDOW         # this step's longest draft
        # Gapped drafts keep figures of their own, so their misses (prose has a few) never
        # shorten the window or raise the bar of the copies this drafter makes.
        self.gapped_share = 1.0
        self.gapped = False                 # the last draft came from a gapped match
        self.respelled_share = 1.0          # the same for drafts across a respelling
        self.spelled = False                # the last draft came from one
        self.pooled = False                 # the last draft came from an earlier answer
        self.pool_start = -1                # where in the pool that draft started
        self.pool_next: int | None = None   # where the answer followed would go on
        self.pool_generation = 0
        self.trail = CopyTrail(controls)
        self.edited = False                 # the last draft resumed a copy past an edit
        self.source: int | None = None      # where in the context the last draft was copied

    def propose(self, context: list[int], n_max: int) -> list[int]:
        """The draft, cut before the first control token."""
        return before_control(self._propose(context, n_max), self.controls)

    def _propose(self, context: list[int], n_max: int) -> list[int]:
        self.gapped = self.spelled = self.pooled = self.edited = False
        self.source = None
        self.trail.observe(context)
        n_max = min(n_max, self.window)
        if n_max <= 0 or len(context) <= self.index.n:
            return []
        self.index.sync(context)
        m, starts = self.index.matches()
        need = self.index.n * (1 if self.share >= FLOOR else 2)
        if self.pool is not None:
            near = (self.pool_next if self.pool_generation == self.pool.generation
                    else None)
            _, draft, start = self.pool.continuation(context, max(need, m + 1), n_max, near)
            if draft:
                self.pooled, self.pool_start = True, start
                self.pool_generation = self.pool.generation
                return draft
        resumed = self.trail.resume(context) if m < EDIT_MATCH else None
        if resumed is not None:
            self.edited, self.source = True, resumed
            return context[resumed:resumed + min(n_max, LOOKUP_WINDOW)]
        if m >= need:
            self.source = starts[0]
            return agreed(context, starts, min(n_max, DRAFT_PER_MATCH * m))
        if len(context) <= self.prompt_len:     # the prompt's end: no record in the answer
            return []
        m, starts = self.index.gapped_matches()
        if m >= ANCHOR_MIN * (1 if self.gapped_share >= FLOOR else 2):
            self.gapped = True
            return agreed(context, starts, min(n_max, LOOKUP_WINDOW, DRAFT_PER_MATCH * m))
        if self.respelled is None:
            return []
        starts = self.respelled.starts(
            context, RESPELLED_MIN + (0 if self.respelled_share >= FLOOR else 1))
        self.spelled = bool(starts)
        return agreed(context, starts, min(n_max, LOOKUP_WINDOW)) if starts else []

    def plan(self, context: list[int], n_max: int) -> Plan:
        return self.propose(context, n_max), None

    @property
    def sort(self) -> str:
        """The sort of the last draft, for ``auto`` (``tuning.SortFigures``): "pool" (an
        earlier answer), "gapped", "spelled", "edited" (a copy resumed past an edit), or ""
        for a copy from the context."""
        return ("pool" if self.pooled else "edited" if self.edited else
                "gapped" if self.gapped else "spelled" if self.spelled else "")

    def on_accept(self, drafted: int, accepted: int, step_s: float = 0.0) -> None:
        # A copy's trail: a main copy or a resumed one that held for a token (a refused
        # resumption is not a copy to leave again).
        copied = drafted and self.source is not None and (accepted or not self.edited)
        self.trail.drafted(self.source if copied else None, accepted,
                           len(self.index.tokens), self.edited)
        if drafted and self.pooled:
            self.pool_next = self.pool_start + accepted
        if drafted and self.gapped:
            self.gapped_share += FLOOR_WEIGHT * (accepted / drafted - self.gapped_share)
        elif drafted and self.spelled:
            self.respelled_share += FLOOR_WEIGHT * (accepted / drafted - self.respelled_share)
        elif drafted and not self.edited:
            self.share += FLOOR_WEIGHT * (accepted / drafted - self.share)
            self.window = (min(2 * self.window, LOOKUP_WINDOW_MAX) if accepted == drafted
                           else LOOKUP_WINDOW)
        self.gapped = self.spelled = self.pooled = self.edited = False
        self.source = None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.add(self.index.tokens[max(0, self.prompt_len - MATCH_CAP):])


class PredictionDrafter:
    """Predicted Outputs: the draft is the prediction's continuation where the answer stands
    in it. While the answer follows the prediction the cursor moves on with it; after a
    mismatch the answer's last 3 (else 2, else 1) tokens are looked up in the prediction, at
    the cursor or after it first (the nearest place forward), else anywhere before it."""

    method = "prediction"

    def __init__(self, prediction: list[int], prompt_len: int, n_min: int = NGRAM_MIN,
                 n_max: int = NGRAM_MAX):
        self.prediction = list(prediction)
        self.prompt_len = prompt_len       # context[prompt_len:] is the answer so far
        self.n_min, self.n_max = n_min, n_max
        self.cursor: int | None = 0         # where the answer stands in the prediction
        self.last = 0                       # the cursor before it was lost
        self.seen = 0                       # answer tokens already followed
        self.window = PREDICTION_WINDOW     # this step's longest draft

    def propose(self, context: list[int], n_max: int) -> list[int]:
        answer = context[self.prompt_len:]
        if len(answer) < self.seen:
            self.cursor, self.seen = None, 0
        for token in answer[self.seen:]:
            if self.cursor is not None and self.cursor < len(self.prediction) \
                    and self.prediction[self.cursor] == token:
                self.cursor += 1
            else:
                if self.cursor is not None:
                    self.last = self.cursor
                self.cursor = None
        self.seen = len(answer)
        if self.cursor is None:
            self.cursor = self._find(answer)
        if self.cursor is not None:
            self.last = self.cursor
        if self.cursor is None or n_max <= 0:
            return []
        return self.prediction[self.cursor:self.cursor + min(n_max, self.window)]

    def _find(self, answer: list[int]) -> int | None:
        """Where the answer's last n tokens end in the prediction (longest n first; the
        first place at or after the last cursor, else the last place before it)."""
        pred = self.prediction
        for n in range(min(self.n_max, len(answer)), self.n_min - 1, -1):
            tail = answer[-n:]
            ends = [e for e in range(n, len(pred) + 1) if pred[e - n:e] == tail]
            ahead = [e for e in ends if e >= self.last]
            if ahead or ends:
                return ahead[0] if ahead else ends[-1]
        return None

    def plan(self, context: list[int], n_max: int) -> Plan:
        return self.propose(context, n_max), None

    def on_accept(self, drafted: int, accepted: int, step_s: float = 0.0) -> None:
        if drafted:
            self.window = (min(2 * self.window, PREDICTION_WINDOW_MAX) if accepted == drafted
                           else PREDICTION_WINDOW)

    def close(self) -> None:
        pass


class LookupFirst:
    """A model drafter (a draft model, possibly under ``auto``) with prompt lookup in front:
    where the context is being copied (an ``NgramDrafter`` match) the copy is the draft, up
    to the lookup's long cap and at no cost; elsewhere the model guesses, at most ``n_model``
    tokens. A model's drafted token costs a draft decode, a copied one nothing, so code edits
    run at prompt lookup's speed and the model fills the gaps between copies (``plan``: the
    copy now, else what the model wants, a batched ask for a shared draft model or MTP
    heads); what a step's figures say goes back to the part that drafted it, a plain step's
    to the model."""

    def __init__(self, model, n_model: int, pool: AnswerPool | None = None,
                 prompt_len: int = 0, spelling: Callable[[int], int] | None = None,
                 controls: frozenset[int] = frozenset()):
        self.lookup = NgramDrafter(pool=pool, prompt_len=prompt_len, spelling=spelling,
                                   controls=controls)
        self.model, self.n_model = model, n_model
        self.method = model.method
        self.copied = False                 # the last draft came from the lookup

    def first(self, context: list[int], n_max: int) -> list[int]:
        draft = self.lookup.propose(context, n_max)
        self.copied = bool(draft)
        return draft

    def propose(self, context: list[int], n_max: int) -> list[int]:
        return self.first(context, n_max) or self.model.propose(context,
                                                                min(n_max, self.n_model))

    def plan(self, context: list[int], n_max: int) -> Plan:
        copy = self.first(context, n_max)
        return (copy, None) if copy else self.model.plan(context, min(n_max, self.n_model))

    def on_accept(self, drafted: int, accepted: int, step_s: float = 0.0) -> None:
        part = self.lookup if self.copied and drafted else self.model
        self.copied = False
        part.on_accept(drafted, accepted, step_s)

    def close(self) -> None:
        self.lookup.close()
        self.model.close()
