"""Which drafter a job gets: ``SpecConfig`` (a model's ``speculative`` setting, parsed) and
``Speculation`` (one engine's choice per request, and the ``auto`` figures it keeps).

A request's own prediction (OpenAI Predicted Outputs) always drafts, whatever the setting;
otherwise ``off`` drafts nothing, ``ngram`` drafts by prompt lookup, ``{draft = id}`` with the
draft model, ``mtp`` with the target's own MTP heads (``mtp``), and ``auto`` drafts by prompt
lookup (or the draft model when one is named, or MTP heads whose separate file was pulled) only
as far as ``tuning`` finds it pays, per kind of request. A model whose memory cannot drop a
sequence's tail (recurrent or hybrid layers) drafts only when its context keeps recurrent-state
snapshots for a whole draft (``n_rs_seq >= n_max``, which the engine sets for ``mtp``): nothing
else could roll a draft back.
"""
from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from hypnos.engines.llama.speculative import Drafter, Drafting, SpecStats
from hypnos.engines.llama.speculative.drafts import (AnswerPool, LookupFirst, NgramDrafter,
                                                     PredictionDrafter)
from hypnos.engines.llama.speculative.vocabulary import control_tokens, llama_spelling
from hypnos.engines.llama.speculative.tuning import AutoDrafter, KindStats

MODES = ("off", "auto", "ngram", "draft", "mtp")
#: Default draft lengths. A draft model pays a decode per drafted token, so it drafts a few;
#: prompt lookup and a prediction cost nothing to draft and are usually right where they
#: draft at all, and verifying a long draft costs far less per token than a short one (on
#: 2 CPU threads, 64 drafted tokens cost 8x a plain step, 4 cost 2.3x), so they go long.
N_MAX, NGRAM_N_MAX, PREDICTION_N_MAX = 4, 64, 32
N_MAX_LIMIT = 64


def default_n_max(mode: str, draft: str | None = None) -> int:
    """The draft length a mode runs with when the setting names none."""
    return NGRAM_N_MAX if mode in ("ngram", "auto") and draft is None else N_MAX


@dataclass(frozen=True)
class SpecConfig:
    mode: str = "off"
    draft: str | None = None             # the draft model's id (mode "draft", or "auto")
    n_max: int = N_MAX
    #: A draft model drafts behind prompt lookup (``LookupFirst``) unless ``lookup = false``.
    lookup: bool = True


def parse_spec(value) -> SpecConfig:
    """``"off" | "auto" | "ngram" | "mtp" | {draft = "<id>", n_max = 4}`` (a table may also
    say ``mode = "auto"`` to measure a named draft, ``mode = "mtp"`` with its ``n_max``, and
    ``lookup = false`` for a draft model without prompt lookup in front).
    Raises ValueError saying what is wrong."""
    if value is None:
        return SpecConfig()
    if isinstance(value, str):
        if value not in ("off", "auto", "ngram", "mtp"):
            raise ValueError(f"must be \"off\", \"auto\", \"ngram\", \"mtp\" or a table "
                             f"with draft, not {value!r}")
        return SpecConfig(mode=value, n_max=default_n_max(value))
    if not isinstance(value, dict):
        raise ValueError("must be a string or a table {draft = \"<model id>\", n_max = 4}")
    unknown = set(value) - {"draft", "n_max", "mode", "lookup"}
    if unknown:
        raise ValueError(f"unknown key {sorted(unknown)[0]!r} (draft, n_max, mode, lookup)")
    lookup = value.get("lookup", True)
    if not isinstance(lookup, bool):
        raise ValueError("lookup must be true or false")
    draft = value.get("draft")
    if draft is not None and (not isinstance(draft, str) or not draft):
        raise ValueError("draft must be a model id")
    mode = value.get("mode", "draft" if draft else "ngram")
    n_max = value.get("n_max", default_n_max(mode, draft))
    if not isinstance(n_max, int) or isinstance(n_max, bool) or not 1 <= n_max <= N_MAX_LIMIT:
        raise ValueError(f"n_max must be an integer in 1..{N_MAX_LIMIT}")
    if mode not in MODES or (mode == "draft" and draft is None):
        raise ValueError(f"mode must be one of {', '.join(MODES)} (draft needs a draft id)")
    if mode == "mtp" and draft is not None:
        raise ValueError("mode \"mtp\" drafts with the model's own heads: no draft id")
    return SpecConfig(mode=mode, draft=draft, n_max=n_max, lookup=lookup)


#: A draft model's per-sequence drafters: seq_id -> Drafter (``draft_model``).
DraftSource = Callable[[int], Drafter]

#: An engine keeps what it learnt from answers for this many partitions (keys) at most, the
#: least recently used dropped first: so its answer pools hold at most
#: ``PARTITIONS * drafts.POOL_TOKENS`` tokens (8 x 16384).
PARTITIONS = 8


@dataclass
class Learnt:
    """What one partition's answers taught an engine: the answers themselves, which prompt
    lookup drafts from, and ``auto``'s figures per kind of request (which say whether that
    text was guessed well). Never shown to another partition's requests."""
    pool: AnswerPool = field(default_factory=AnswerPool)
    kinds: dict[str, KindStats] = field(default_factory=dict)


class Speculation:
    """One engine's speculation. ``for_job`` is called in the request's thread; a
    partition's ``Learnt`` is then only touched on the decode thread (its pool grows, its
    ``auto`` figures move), dropping it from ``learnt`` only forgets it."""

    def __init__(self, config: SpecConfig, can_rollback: bool,
                 draft_source: DraftSource | None = None, observer=None,
                 spelling: Callable[[int], int] | None = None,
                 controls: frozenset[int] = frozenset()):
        self.config = config
        self.can_rollback = can_rollback
        self.draft_source = draft_source
        #: The vocabulary's names of tokens (``respelled.Spelling``) prompt lookup matches
        #: values copied without their space by; None: exact tokens only.
        self.spelling = spelling
        #: The vocabulary's control tokens, which no prompt lookup draft crosses.
        self.controls = controls
        #: What the decode loop shows every target batch to (``MtpDrafter.observe_batch``).
        self.observer = observer
        #: Partition -> what its answers taught, least recently used first (``PARTITIONS``).
        self.learnt: collections.OrderedDict[str, Learnt] = collections.OrderedDict()
        self._lock = threading.Lock()

    def of(self, partition: str) -> Learnt:
        """The partition's ``Learnt`` (a fresh one when it has none), now the most recent."""
        with self._lock:
            learnt = self.learnt.pop(partition, None) or Learnt()
            self.learnt[partition] = learnt
            while len(self.learnt) > PARTITIONS:
                self.learnt.popitem(last=False)
            return learnt

    def for_job(self, prediction: list[int] | None, prompt_len: int, kind: str,
                partition: str = "") -> tuple[Drafter | None, DraftSource | None,
                                              SpecStats | None]:
        """(drafter, per-sequence drafter maker, stats) for one request; all None when it
        does not draft. ``kind``: "tools", "structured" or "text". Prompt lookup drafts from
        ``partition``'s answers only, and ``auto`` weighs that partition's figures only.
        Which drafter: the first row of ``RECIPES`` that the setting and the engine match."""
        if not self.can_rollback:
            return None, None, None
        if prediction:
            n = max(self.config.n_max, PREDICTION_N_MAX)
            return PredictionDrafter(prediction, prompt_len), None, SpecStats("prediction", n)
        if self.config.mode == "off":
            return None, None, None
        learnt = self.of(partition)
        recipe = self.recipe()
        if recipe is None:
            return None, None, None
        method, layers = recipe
        n = self.config.n_max
        stats = (learnt.kinds.setdefault(kind, KindStats(n)) if "auto" in layers
                 else None)
        wrap = {"auto": lambda d: AutoDrafter(d, stats),
                "lookup": lambda d: LookupFirst(d, n, learnt.pool, prompt_len, self.spelling,
                                                self.controls)}
        wrappers = [wrap[layer] for layer in layers[1:]]
        figures = SpecStats(method, n, lookup_max=NGRAM_N_MAX if "lookup" in layers else 0)
        if layers[0] == "ngram":
            return compose(NgramDrafter(pool=learnt.pool, prompt_len=prompt_len,
                                        spelling=self.spelling, controls=self.controls),
                           wrappers), None, figures
        source = self.draft_source
        assert source is not None               # a "model" row needs one (``recipe``)
        if not wrappers:
            return None, source, figures
        return None, (lambda seq: compose(source(seq), wrappers)), figures

    def recipe(self) -> tuple[str, tuple[str, ...]] | None:
        """The engine's row of ``RECIPES`` (method, layers), or None: it does not draft."""
        config = self.config
        facts = (config.mode, self.draft_source is not None, self.observer is not None,
                 config.lookup)
        for want, method, layers in RECIPES:
            if all(w is None or w == f for w, f in zip(want, facts, strict=True)):
                return method, layers
        return None


#: Which drafter a request without a prediction gets: the first row whose conditions hold,
#: (mode, a draft source, MTP heads (the source is theirs), lookup in front (the setting);
#: None: either) -> (the method it reports, its layers, innermost first). "ngram": prompt
#: lookup over the partition's answers; "model": the draft source's drafter for the slot's
#: sequence (made when the job starts); "auto": ``auto``'s policy for the kind of request
#: over what is inside; "lookup": prompt lookup in front of it (``LookupFirst``), which
#: drafts where it copies so ``auto`` weighs the model's drafts only. No row: no drafting.
RECIPES: tuple[tuple[tuple[str, bool | None, bool | None, bool | None], str,
                     tuple[str, ...]], ...] = (
    (("ngram", None, None, None), "ngram", ("ngram",)),
    (("draft", True, None, False), "draft", ("model",)),
    (("draft", True, None, True), "draft", ("model", "lookup")),
    (("auto", True, True, None), "auto:mtp", ("model", "auto")),
    (("auto", True, False, False), "auto:draft", ("model", "auto")),
    (("auto", True, False, True), "auto:draft", ("model", "auto", "lookup")),
    (("auto", False, None, None), "auto:ngram", ("ngram", "auto")),
    (("mtp", True, None, None), "mtp", ("model",)),
)


def compose(drafter: Drafter, wrappers: list[Callable[[Drafter], Drafter]]) -> Drafter:
    """``drafter`` inside ``wrappers``, the first innermost."""
    for wrap in wrappers:
        drafter = wrap(drafter)
    return drafter


def request_kind(req) -> str:
    """The kind of request ``auto`` keeps figures for: "tools" (tools offered), "structured"
    (a grammar or a response format) or "text"."""
    if req.tools and req.tool_choice != "none":
        return "tools"
    if req.grammar or req.response_format:
        return "structured"
    return "text"


def setup_job(job, speculation: Speculation | None, req, tokenize) -> None:
    """Give ``job`` (a ``slots.Job``) its ``Drafting`` for ``req`` (a ``ChatRequest``), if
    it drafts; ``tokenize(text)`` tokenizes the prediction as plain text. Media prompts
    never draft."""
    if speculation is None or job.prefill is not None:
        return
    prediction = tokenize(req.prediction) if req.prediction else None
    drafter, drafter_for, stats = speculation.for_job(
        prediction, len(job.prompt), request_kind(req), req.partition)
    if stats is not None:
        job.drafting = Drafting(stats, drafter, drafter_for)


def uses_mtp(spec) -> bool:
    """Whether the engine for ``spec`` (a ``LoadSpec``) drafts with MTP heads: under
    ``mtp``, and under ``auto`` without a draft model when a separate head was pulled
    (``files["mtp_path"]``: the catalog's optional ``mtp`` file)."""
    config = parse_spec(spec.options.get("speculative"))
    return config.mode == "mtp" or (config.mode == "auto" and config.draft is None
                                    and spec.files.get("mtp_path") is not None)


def mtp_n_max(spec) -> int:
    """The draft length MTP heads run with: the setting's, but ``auto`` over heads drafts a
    draft model's few unless its table names ``n_max`` (prompt lookup's long default does not
    suit heads that pay a decode per drafted token)."""
    value = spec.options.get("speculative")
    config = parse_spec(value)
    named = isinstance(value, dict) and "n_max" in value
    return config.n_max if config.mode == "mtp" or named else N_MAX


def rs_snapshots(spec) -> int:
    """Recurrent-state snapshots per sequence the target's context keeps (``n_rs_seq``): a
    whole draft's worth with MTP heads (MTP models are mostly hybrid), else none."""
    return mtp_n_max(spec) if uses_mtp(spec) else 0


def build_speculation(ll, model, vocab, spec, n_ctx_seq: int, n_batch: int, threads: int,
                      ctx=None) -> tuple[Speculation, object | None]:
    """One engine's ``Speculation`` for its ``LoadSpec`` (``options["speculative"]``, the
    draft's weights in ``files["draft_path"]``, a separate MTP head in ``files["mtp_path"]``),
    and the ``DraftModel`` or ``MtpDrafter`` (over the target context ``ctx``) it built
    (blocks; the caller closes it, before freeing ``ctx``), if any. Raises EngineError for a
    draft of another vocabulary, MtpUnavailable for ``mtp`` on a model without heads."""
    config = parse_spec(spec.options.get("speculative"))
    if uses_mtp(spec):
        config = replace(config, n_max=mtp_n_max(spec))
    stateful = ll.llama_model_is_recurrent(model) or ll.llama_model_is_hybrid(model)
    can_rollback = not stateful or rs_snapshots(spec) >= config.n_max
    if uses_mtp(spec):
        from hypnos.engines.llama.speculative.mtp import open_mtp
        mtp = open_mtp(ll, model, ctx, model_id=spec.model_id, mtp_path=spec.files.get(
            "mtp_path"), gpu_layers=spec.gpu_layers, n_seq_max=spec.slots,
            n_ctx=n_ctx_seq * spec.slots, n_threads=threads, n_batch=n_batch)
        return Speculation(config, can_rollback, mtp.for_seq, observer=mtp,
                           spelling=llama_spelling(ll, vocab),
                           controls=control_tokens(ll, vocab, spec.weights_path)), mtp
    draft = None
    path = spec.files.get("draft_path")
    if config.draft is not None and config.mode in ("draft", "auto") and can_rollback:
        from hypnos.engines.errors import EngineError
        from hypnos.engines.llama.cpu import extra_buffers_ok
        from hypnos.engines.llama.speculative.draft_model import DraftModel
        if path is None:
            raise EngineError(f"{spec.model_id}: speculative draft {config.draft} has no "
                              "weights file (is it a configured llama model?)")
        draft = DraftModel(ll, path, config.draft, vocab, spec.slots, n_ctx_seq, threads,
                           n_batch, gpu_layers=spec.gpu_layers,
                           extra_bufts=bool(spec.options.get("extra_buffers", extra_buffers_ok())))
    controls = (control_tokens(ll, vocab, spec.weights_path) if config.mode != "off"
                else frozenset())
    return Speculation(config, can_rollback, draft.for_seq if draft else None,
                       spelling=llama_spelling(ll, vocab), controls=controls), draft
