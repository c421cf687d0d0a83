"""Rendering for ``hypnos chat``: the growing answer (thinking then Markdown), the one-line
footer after it, the model list. Pure: functions return strings or rich renderables and do
no I/O; the loop prints them.
"""
from __future__ import annotations

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markdown import Markdown
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from hypnos.cli.chat.api import chat_models

TIERS = {"tier1_gpu_vram": "tier 1", "tier2_pinned_ram": "tier 2", "tier3_nvme_ssd": "tier 3"}
THINKING_TAIL = 6       # lines of thoughts shown while the model thinks


def tier_move(telemetry: dict) -> str:
    """What the answer cost in tier moves: a promotion (from, to, seconds), the models it
    evicted; "no tier move" when the model was already in place."""
    before = telemetry.get("previous_tier")
    after = (telemetry.get("placement") or {}).get("primary_tier")
    switch_s = (telemetry.get("tier_switch_latency_ms") or 0) / 1000
    parts = []
    if before and after and before != after:
        parts.append(f"moved {TIERS.get(before, before)} -> {TIERS.get(after, after)} "
                     f"in {switch_s:.2f} s")
    elif switch_s > 0:
        parts.append(f"loaded in {switch_s:.2f} s")
    evicted = telemetry.get("evicted_models") or []
    if evicted:
        parts.append("evicted " + " ".join(evicted))
    return "; ".join(parts) if parts else "no tier move"


def footer(usage: dict, telemetry: dict, elapsed_s: float) -> str:
    """``12.3 tok/s, 40 tokens, 31 cached, no tier move``: decode speed (the engine's,
    else completion tokens over the wall time), the answer's tokens, the prompt tokens the
    slot cache served, the tier move."""
    engine = telemetry.get("engine") or {}
    tokens = int(usage.get("completion_tokens") or 0)
    speed = engine.get("decode_tokens_per_s")
    if speed is None:
        speed = tokens / elapsed_s if elapsed_s > 0 else 0.0
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return f"{speed:.1f} tok/s, {tokens} tokens, {cached} cached, {tier_move(telemetry)}"


def thought_line(thinking: str, secs: float | None) -> Text:
    """The collapsed thinking block: one dim line."""
    words = len(thinking.split())
    took = f" for {secs:.1f} s" if secs is not None else ""
    return Text(f"[thought{took}, {words} words; /think show expands]", style="dim")


def thoughts(thinking: str) -> Text:
    """The whole thinking block, dim (``/think show``)."""
    return Text(thinking.strip() or "(no thoughts)", style="dim italic")


class Tail:
    """The last ``rows`` lines of a renderable: what a live view of a growing answer shows,
    so the newest words stay on screen once the answer is taller than the terminal (the
    whole answer is printed when it ends)."""

    def __init__(self, renderable: RenderableType, rows: int):
        self.renderable, self.rows = renderable, max(1, rows)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = console.render_lines(self.renderable, options, pad=False)
        for line in lines[-self.rows:]:
            yield from line
            yield Segment.line()


class AnswerView:
    """The answer as it grows: the thoughts dim while the model thinks, then one collapsed
    line and the answer as Markdown. ``renderable()`` is what rich's Live shows."""

    def __init__(self) -> None:
        self.thinking = ""
        self.content = ""
        self.thought_secs: float | None = None
        self.done = False           # the stream ended: the thoughts fold even without answer

    def add(self, content: str, reasoning: str, elapsed_s: float) -> None:
        self.thinking += reasoning
        if content and not self.content and self.thinking:
            self.thought_secs = elapsed_s
        self.content += content

    def renderable(self) -> RenderableType:
        parts: list[RenderableType] = []
        if self.thinking and not self.content and not self.done:
            tail = self.thinking.strip().splitlines()[-THINKING_TAIL:]
            parts.append(Text("thinking...\n" + "\n".join(tail), style="dim italic"))
        elif self.thinking:
            parts.append(thought_line(self.thinking, self.thought_secs))
        if self.content:
            parts.append(Markdown(self.content))
        return Group(*parts)


def tiers_table(status: dict) -> Table:
    """Every model of a /v1/memory/status body, by tier: where it is, its layers per tier,
    its leases and queue (``hypnos tier`` draws the whole picture)."""
    table = Table(box=None, pad_edge=False, show_edge=False)
    for col in ("model", "tier", "layers gpu/ram/ssd", "context", "leases", "queued"):
        table.add_column(col, no_wrap=True)
    models = sorted(status.get("models", []), key=lambda m: m.get("current_tier", ""))
    for m in models:
        p = m.get("placement") or {}
        layers = f"{p.get('gpu_layers', 0)}/{p.get('pinned_ram_layers', 0)}/" \
                 f"{p.get('ssd_layers', 0)}"
        table.add_row(m["id"], TIERS.get(m.get("current_tier", ""), "-"), layers,
                      str(p.get("allocated_context_len") or "-"),
                      str(m.get("active_leases", 0)), str(m.get("queued", 0)))
    return table


def models_table(status: dict, current: str) -> Table:
    """The chat models: id (the current one marked), where each is, what it serves."""
    table = Table(box=None, pad_edge=False, show_edge=False)
    for col in ("", "model", "tier", "serves"):
        table.add_column(col, no_wrap=True)
    for m in chat_models(status):
        mark = "*" if m["id"] == current else ""
        table.add_row(mark, m["id"], TIERS.get(m.get("current_tier", ""), "-"),
                      ", ".join(m.get("modalities") or [m.get("modality", "")]))
    return table
