"""The slots of a ``DecodeLoop`` and the queue in front of them: ``Job`` (one chat request as
the decode thread sees it), ``JobRules`` (what its answer must obey beyond sampling),
``Slot`` (one KV sequence and the tokens in it), ``pick_slot`` (which free slot serves a
prompt best) and ``SlotQueue``, which gives waiting jobs their slots: FIFO, a session's own
slot, the choices of one request together and in order.

``SlotQueue`` is the half of ``DecodeLoop`` that decides, never decodes; every ``*_locked``
method is called holding the loop's ``cond``.
"""
from __future__ import annotations

import collections
import queue
import threading
import time
from dataclasses import dataclass, field
from collections.abc import Callable

from hypnos.engines.chat_format.closing import CallCloser
from hypnos.engines.errors import SessionCapacity
from hypnos.engines.llama.checkpoints import Checkpoint
from hypnos.engines.llama.sampling import Sampling, ThinkBudget
from hypnos.engines.llama.speculative import Drafting
from hypnos.engines.records import ChoiceGroup


@dataclass(eq=False)
class JobRules:
    """What a job's answer must obey beyond its sampler, checked on the decode thread at
    every delivered token (``DecodeLoop._on_token``), and the state those checks keep."""
    think: ThinkBudget | None = None          # closes the thinking block at its budget
    closer: CallCloser | None = None          # a forced call: closes it within max_tokens
    closed_call: bool = False                   # the closer ended the call (set before "done")
    repetition_bound: int = 0                   # 0: no loop detection
    history: list[int] = field(default_factory=list)   # generated token ids (loop detection)


@dataclass(eq=False)
class Job:
    """One chat request as the decode thread sees it: the prompt, its limits, the events
    its caller reads, its timings and what its slot did with it; its ``rules`` and its
    ``drafting`` (speculative decoding; None: it does not draft) are their own types."""
    prompt: list[int]
    max_tokens: int
    sampling: Sampling
    stop: threading.Event                       # set: finish "cancelled" at the next step
    events: queue.Queue = field(default_factory=queue.Queue)
    t_submit: float = field(default_factory=time.perf_counter)
    t_assigned: float | None = None
    t_first: float | None = None
    t_done: float | None = None
    cached: int = 0                             # prompt tokens reused from the slot's KV
    #: Of ``cached``, the tokens the slot held, and those restored from the prompt cache's
    #: RAM and disk tiers: {"slot": n, "ram": n, "disk": n}.
    cached_from: dict[str, int] = field(default_factory=dict)
    #: Where the prompt parted from its partition's best cached prefix (``parting``).
    parting: dict | None = None
    generated: int = 0                          # tokens delivered (EOG not counted)
    sampled: int = 0                            # tokens sampled (EOG counted)
    concurrent: int = 0                         # most slots sharing one decode step
    pending: list[int] = field(default_factory=list)
    sampler: object = None
    started: bool = False
    session_key: str | None = None
    session_yields: bool = False                # its binding gives way (``bind_locked``)
    tag: str | None = None                      # its conversation, unbound: the cache's tag
    target: Slot | None = None                # the slot its session key is bound to
    logprobs: int | None = None                 # None: off; else alternatives per token
    rules: JobRules = field(default_factory=JobRules)
    # Evaluates the whole prompt (text and media) into a KV sequence on the decode thread:
    # (ctx, seq_id) -> positions filled. Set for prompts with images or audio.
    prefill: Callable | None = None
    group: ChoiceGroup | None = None            # one of n choices: wait for the others
    group_ready: bool = False                   # every member of its group was submitted
    drafting: Drafting | None = None
    #: Whose cached prefixes it may reuse (``ChatRequest.partition``).
    partition: str = ""
    pause: threading.Event | None = None        # set: no step for it (``ChatRequest.pause``)
    #: Token counts where a prefix the caller wants kept ends (the system prompt and tools,
    #: a ``cache_control`` mark): checkpointed while prefilling on a model that needs
    #: checkpoints (``checkpoints``). Empty: the defaults only (the tail, every N tokens).
    boundaries: list[int] = field(default_factory=list)
    #: Token counts still to checkpoint in this prefill, ascending (set by ``_start``).
    checkpoint_at: list[int] = field(default_factory=list)


#: How long the members of a choice group already submitted wait for the missing ones
#: (one that failed before submitting) before they start without them (seconds).
GROUP_WAIT_S = 0.5


@dataclass(eq=False)
class Slot:
    seq_id: int
    tokens: list[int] = field(default_factory=list)  # what this sequence's KV holds
    #: Partial states after some prefixes of ``tokens`` (ascending ``n_tokens``, at most
    #: ``CHECKPOINTS_PER_SLOT``), on a model whose KV cannot simply be cut back.
    checkpoints: list[Checkpoint] = field(default_factory=list)
    job: Job | None = None
    last_used: float = 0.0                           # when its last job ended
    key: str | None = None                           # the session bound to this slot
    yields: bool = False                             # that binding gives way (bind_locked)
    #: The session whose conversation its KV holds, bound, unbound or a tag (the cache's).
    released_key: str | None = None
    #: The partition whose tokens the KV holds: only a job of the same one reuses them.
    partition: str = ""

    def prefix_for(self, prompt: list[int], partition: str) -> int:
        """The prompt tokens this slot's KV can serve a job of ``partition``: the common
        prefix, 0 for another partition's KV (as if the slot held nothing)."""
        return common_prefix(self.tokens, prompt) if partition == self.partition else 0


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def pick_slot(free: list[Slot], prompt: list[int], partition: str = "",
              kept: Callable[[Slot], bool] | None = None) -> Slot:
    """The free slot whose KV serves ``prompt`` of ``partition`` best.

    A slot matches when the common prefix covers at least half of the prompt or half of
    what the slot holds; the longest matching prefix wins. Only a slot of the same
    partition can match: another partition's slot scores as holding nothing, so which slot
    is taken never depends on another partition's text. With no match, a slot that loses
    nothing is taken first: an empty one, or one whose tokens the tiers below already hold
    (``kept``: the prompt cache); then the least recently used, so a short unrelated
    prompt does not overwrite a long cached conversation because of a few shared template
    tokens.
    """
    def score(slot: Slot) -> int:
        lcp = slot.prefix_for(prompt, partition)
        matches = lcp > 0 and (2 * lcp >= len(prompt) or 2 * lcp >= len(slot.tokens))
        return lcp if matches else 0

    scores = [score(s) for s in free]
    if max(scores) > 0:
        return free[max(range(len(free)), key=lambda i: (scores[i], -free[i].last_used))]

    def loses_nothing(slot: Slot) -> bool:
        return not slot.tokens or (kept is not None and kept(slot))

    return max(free, key=lambda s: (loses_nothing(s), -s.last_used))


class SlotQueue:
    """Waiting jobs and the slots they get. A base of ``DecodeLoop``, which sets ``slots``,
    ``waiting``, ``cond`` (a ``threading.Condition``) and ``closing``."""

    slots: list[Slot]
    waiting: collections.deque[Job]
    cond: threading.Condition
    closing: bool

    def _kept_below(self, slot: Slot) -> bool:
        """Whether the tiers below the slots (the prompt cache) hold the slot's tokens, so
        giving it to another conversation loses nothing. A loop without a cache: never."""
        return False

    def _gather_locked(self, key: str, force: bool = False) -> None:
        """Once every choice of group ``key`` is waiting (or ``force``), mark them ready and
        put them in index order where the first of them waits, so they are assigned slots
        together and in order: the same request then runs the same batches."""
        members = [j for j in self.waiting if j.group is not None and j.group.key == key]
        if not members or (len(members) < members[0].group.size and not force):
            return
        first = next(i for i, j in enumerate(self.waiting) if j in members)
        rest = [j for j in self.waiting if j not in members]
        ordered = sorted(members, key=lambda j: j.group.index)
        for j in ordered:
            j.group_ready = True
        self.waiting = collections.deque(rest[:first] + ordered + rest[first:])

    def _release_stale_groups_locked(self) -> float | None:
        """Start groups whose missing members are overdue; the seconds until the next one
        is, or None when no group waits."""
        now, soonest = time.perf_counter(), None
        for job in list(self.waiting):
            if job.group is None or job.group_ready:
                continue
            due = job.t_submit + GROUP_WAIT_S - now
            if due <= 0:
                self._gather_locked(job.group.key, force=True)
            else:
                soonest = due if soonest is None else min(soonest, due)
        return soonest

    def withdraw(self, job: Job) -> bool:
        """Take a job that never got a slot out of the queue. False if it already has one."""
        with self.cond:
            if job in self.waiting:
                self.waiting.remove(job)
                return True
            return False

    def bind_locked(self, key: str, prompt: list[int] | None = None,
                    free_only: bool = False, partition: str = "",
                    yields: bool = False) -> Slot | None:
        """The slot bound to ``key``, binding one if needed: an unbound slot, a free one
        first, the one whose KV serves ``prompt`` (of ``partition``) best; with every slot
        bound, the one a yielding session (``yields``: named by a cache hint) left idle
        longest; None when ``free_only`` and no unbound slot is free. Raises
        SessionCapacity when no slot can be had. Call holding ``cond``."""
        for slot in self.slots:
            if slot.key == key:
                slot.yields = slot.yields and yields    # named once by session_id: kept
                return slot
        unbound = [s for s in self.slots if s.key is None] or self._given_way_locked()
        if not unbound:
            raise SessionCapacity(f"every slot ({len(self.slots)}) holds a session; "
                                  "release one first")
        free = [s for s in unbound if s.job is None]
        if free_only and not free:
            return None
        slot = pick_slot(free or unbound, prompt or [], partition, self._kept_below)
        slot.key, slot.yields = key, yields
        return slot

    def _given_way_locked(self) -> list[Slot]:
        """[the slot of the yielding session idle longest], unbound (its KV stays: the
        prompt cache takes it before it is overwritten), or [] when every bound slot is
        busy, waited for, or bound by ``session_id``."""
        idle = [s for s in self.slots if s.yields and s.job is None
                and not any(job.target is s for job in self.waiting)]
        if not idle:
            return []
        slot = min(idle, key=lambda s: s.last_used)
        slot.key, slot.yields, slot.released_key = None, False, slot.key
        return [slot]

    def release(self, key: str) -> bool:
        """Unbind ``key`` (its KV stays for prefix reuse). False if it was not bound."""
        with self.cond:
            for slot in self.slots:
                if slot.key == key:
                    slot.key, slot.yields, slot.released_key = None, False, key
                    return True
            return False

    def _assign_locked(self) -> None:
        """Give waiting jobs, in order, a free slot: a session's own slot (the job waits
        while it is busy and later jobs may pass it), else the free slot ``pick_slot``
        prefers among the unbound ones, a bound one only when no unbound one is free. A job
        also waits (later jobs may pass it) while a slot whose job is being cancelled holds
        more of its prompt than the slot it would get: that slot frees within one step, so
        a client's retry continues its own cancelled prefill instead of starting over."""
        free = [s for s in self.slots if s.job is None]
        for job in list(self.waiting):
            if not free:
                break
            if job.group is not None and not job.group_ready:
                continue
            if job.target is not None:
                if job.target not in free:
                    continue
                slot = job.target
            else:
                slot = pick_slot([s for s in free if s.key is None] or free, job.prompt,
                                 job.partition, self._kept_below)
                if job.group is None and self._stopping_holds_more(
                        job, slot.prefix_for(job.prompt, job.partition)):
                    continue
            self.waiting.remove(job)
            free.remove(slot)
            slot.job = job
            job.t_assigned = time.perf_counter()

    def _stopping_holds_more(self, job: Job, than: int) -> bool:
        """A slot whose job was told to stop holds more than ``than`` tokens of ``job``'s
        prompt (the evaluated part of a cancelled prefill)."""
        return any(s.job is not None and s.job.stop.is_set() and s.key is None
                   and s.prefix_for(job.prompt, job.partition) > than for s in self.slots)
