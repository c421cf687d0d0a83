"""The prompt sets of ``speculative.py``: ``code`` (return a ~40-line block with one function
renamed: the answer repeats its input), ``story`` (free text) and ``edit`` (return a file with
one line changed; ``prediction`` is the file as sent, the OpenAI Predicted Outputs draft).
Each prompt is {"ask": the user message, "prediction": the predicted answer}."""
from __future__ import annotations

INVENTORY = '''\
from dataclasses import dataclass, field


@dataclass
class Item:
    sku: str
    name: str
    price_cents: int
    quantity: int = 0


@dataclass
class Inventory:
    items: dict[str, Item] = field(default_factory=dict)

    def add_item(self, item: Item) -> None:
        if item.sku in self.items:
            raise ValueError(f"duplicate sku {item.sku}")
        self.items[item.sku] = item

    def restock(self, sku: str, count: int) -> int:
        if count <= 0:
            raise ValueError("count must be positive")
        item = self.items[sku]
        item.quantity += count
        return item.quantity

    def sell(self, sku: str, count: int) -> int:
        item = self.items[sku]
        if count > item.quantity:
            raise ValueError(f"only {item.quantity} of {sku} left")
        item.quantity -= count
        return count * item.price_cents

    def total_value(self) -> int:
        return sum(i.price_cents * i.quantity for i in self.items.values())

    def low_stock(self, threshold: int = 5) -> list[str]:
        return sorted(s for s, i in self.items.items() if i.quantity < threshold)
'''

TOKENIZER = '''\
import re

NUMBER = re.compile(r"\\d+(\\.\\d+)?")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
OPERATORS = "+-*/()"


def read_token(text: str, pos: int) -> tuple[str, str, int]:
    """The token at pos: (kind, text, next position)."""
    while pos < len(text) and text[pos].isspace():
        pos += 1
    if pos == len(text):
        return "end", "", pos
    if text[pos] in OPERATORS:
        return "op", text[pos], pos + 1
    match = NUMBER.match(text, pos)
    if match:
        return "number", match.group(), match.end()
    match = NAME.match(text, pos)
    if match:
        return "name", match.group(), match.end()
    raise SyntaxError(f"unexpected {text[pos]!r} at {pos}")


def tokenize(text: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    while True:
        kind, value, pos = read_token(text, pos)
        if kind == "end":
            return tokens
        tokens.append((kind, value))


def evaluate(text: str, names: dict[str, float]) -> float:
    values = []
    for kind, value in tokenize(text):
        if kind == "number":
            values.append(float(value))
        elif kind == "name":
            values.append(names[value])
    return sum(values)
'''

SCHEDULER = '''\
import heapq
import time
from collections.abc import Callable


class Timer:
    def __init__(self, when: float, action: Callable[[], None], every: float | None):
        self.when = when
        self.action = action
        self.every = every
        self.cancelled = False

    def __lt__(self, other: "Timer") -> bool:
        return self.when < other.when


class Scheduler:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.queue: list[Timer] = []

    def call_later(self, delay: float, action: Callable[[], None]) -> Timer:
        timer = Timer(self.clock() + delay, action, None)
        heapq.heappush(self.queue, timer)
        return timer

    def call_every(self, period: float, action: Callable[[], None]) -> Timer:
        timer = Timer(self.clock() + period, action, period)
        heapq.heappush(self.queue, timer)
        return timer

    def run_due(self) -> int:
        ran, now = 0, self.clock()
        while self.queue and self.queue[0].when <= now:
            timer = heapq.heappop(self.queue)
            if timer.cancelled:
                continue
            timer.action()
            ran += 1
            if timer.every is not None:
                timer.when += timer.every
                heapq.heappush(self.queue, timer)
        return ran
'''


def _block(code: str) -> str:
    return f"```python\n{code}```"


def _rename(code: str, old: str, new: str) -> dict:
    return {"ask": f"Return this code with the function `{old}` renamed to `{new}` "
                   f"everywhere. Reply with the code only.\n\n{_block(code)}",
            "prediction": _block(code.replace(old, new))}


def _change(code: str, what: str) -> dict:
    return {"ask": f"Return this file with one line changed: {what}. Reply with the whole "
                   f"file only, in one code block.\n\n{_block(code)}",
            "prediction": _block(code)}


SETS: dict[str, list[dict]] = {
    "code": [
        _rename(INVENTORY, "restock", "add_stock"),
        _rename(TOKENIZER, "read_token", "next_token"),
        _rename(SCHEDULER, "run_due", "run_pending"),
    ],
    "story": [
        {"ask": "Write a short story about a lighthouse keeper who befriends a seal.",
         "prediction": ""},
        {"ask": "Write a short story about a baker who finds a map inside a loaf of bread.",
         "prediction": ""},
    ],
    "edit": [
        _change(INVENTORY, "make the default threshold of `low_stock` 10 instead of 5"),
        _change(TOKENIZER, 'add "%" to OPERATORS'),
        _change(SCHEDULER, "make `cancelled` start as True in Timer.__init__"),
    ],
}
