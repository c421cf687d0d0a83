"""Drafters without a model: ``NgramDrafter`` (prompt lookup over the prompt and the answer
so far) and ``PredictionDrafter`` (OpenAI Predicted Outputs: the caller's guess of the answer).
Both are deterministic (a point-mass draft), and both are pure: token lists in, tokens out.
"""
from __future__ import annotations

#: The longest and shortest suffix an n-gram lookup matches (longest tried first).
NGRAM_MAX, NGRAM_MIN = 3, 1


class NgramIndex:
    """For each n-gram (``n_min``..``n_max`` tokens) of a growing token list, the position
    right after its latest occurrence that has a continuation. Appending is O(tokens added)."""

    def __init__(self, n_min: int = NGRAM_MIN, n_max: int = NGRAM_MAX):
        self.n_min, self.n_max = n_min, n_max
        self.tokens: list[int] = []
        self.ends: dict[tuple[int, ...], int] = {}
        self.indexed = 0           # n-grams ending before this position are in ``ends``

    def sync(self, tokens: list[int]) -> None:
        """Index ``tokens``: extends in place when it extends what was indexed, else rebuilds.
        Called every decode step with the whole context, so an extension is recognised by
        its length and its ends (O(1), not a compare of the whole list): a context that
        differed inside but matched there would only give worse drafts, never wrong tokens
        (the target checks every one)."""
        old = self.tokens
        if (len(tokens) < len(old)
                or (old and (tokens[0] != old[0] or tokens[len(old) - 1] != old[-1]))):
            self.ends.clear()
            self.indexed = 0
            old = self.tokens = []
        old.extend(tokens[len(old):])
        # An n-gram ending at e (exclusive) is indexed once tokens[e] exists.
        for e in range(max(self.indexed, 1), len(self.tokens)):
            for n in range(self.n_min, min(self.n_max, e) + 1):
                self.ends[tuple(self.tokens[e - n:e])] = e
        self.indexed = max(self.indexed, len(self.tokens))

    def lookup(self, suffix: list[int]) -> int | None:
        """Where the continuation of ``suffix``'s latest earlier occurrence starts: the
        longest suffix (``n_max`` down to ``n_min`` tokens) that occurred before wins."""
        for n in range(min(self.n_max, len(suffix)), self.n_min - 1, -1):
            end = self.ends.get(tuple(suffix[-n:]))
            if end is not None:
                return end
        return None


class NgramDrafter:
    """Prompt lookup: the context's last 3 (else 2, else 1) tokens are found at their latest
    earlier place in the context and the tokens that followed there are the draft. Pays where
    the answer repeats its input (code edits, quotes, structured output)."""

    method = "ngram"

    def __init__(self, n_min: int = NGRAM_MIN, n_max: int = NGRAM_MAX):
        self.index = NgramIndex(n_min, n_max)

    def propose(self, context: list[int], n_max: int) -> list[int]:
        self.index.sync(context)
        start = self.index.lookup(context)
        if start is None or n_max <= 0:
            return []
        return context[start:start + n_max]

    def on_accept(self, drafted: int, accepted: int, step_s: float = 0.0) -> None:
        pass

    def close(self) -> None:
        pass


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
        return self.prediction[self.cursor:self.cursor + n_max]

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

    def on_accept(self, drafted: int, accepted: int, step_s: float = 0.0) -> None:
        pass

    def close(self) -> None:
        pass
