"""Custom click parameter types: bad values are refused here, as usage errors (exit 2)."""
from __future__ import annotations

import re

import click

_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*([kmgtp]?)(i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``24G``, ``24GiB``, ``24GB``, ``24000M``, ``1.5T``, ``512k`` or plain bytes -> bytes.

    Every unit is a power of 1024 (memory is sold in binary units: a "24 GB" GPU has
    24 GiB); ``B`` alone means bytes. Raises ValueError on anything else.
    """
    m = _SIZE.match(text)
    if not m or (m.group(3) and m.group(3).lower() == "ib" and not m.group(2)):
        raise ValueError(f"{text!r} is not a size (examples: 24G, 24GiB, 24000M, 1.5T, "
                         f"25769803776)")
    number, unit = m.group(1), m.group(2).lower()
    if "." in number:
        return int(float(number) * _UNITS[unit])
    return int(number) * _UNITS[unit]


class ByteSize(click.ParamType):
    """A memory size; see `parse_size`."""

    name = "size"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return parse_size(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class CommaList(click.ParamType):
    """A comma-separated list of names, each one of ``choices``."""

    name = "list"

    def __init__(self, choices: tuple[str, ...] | list[str]):
        self.choices = tuple(choices)

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        items = [v.strip() for v in str(value).split(",") if v.strip()]
        if not items:
            self.fail("is empty; give one or more of " + ", ".join(self.choices), param, ctx)
        unknown = [v for v in items if v not in self.choices]
        if unknown:
            self.fail(f"unknown {', '.join(repr(u) for u in unknown)}; choose from "
                      f"{', '.join(self.choices)}", param, ctx)
        return list(dict.fromkeys(items))


BYTE_SIZE = ByteSize()


TIERS = ("tier1_gpu_vram", "tier2_pinned_ram", "tier3_nvme_ssd")
_TIER_ALIASES = {"1": 0, "tier1": 0, "gpu": 0, "vram": 0,
                 "2": 1, "tier2": 1, "ram": 1,
                 "3": 2, "tier3": 2, "ssd": 2, "disk": 2}


class TierType(click.ParamType):
    """A memory tier: 1, 2, 3, tier1, gpu, ram, ssd or the wire name (tier1_gpu_vram ...)."""

    name = "tier"

    def convert(self, value, param, ctx):
        text = str(value).strip().lower()
        if text in TIERS:
            return text
        if text in _TIER_ALIASES:
            return TIERS[_TIER_ALIASES[text]]
        self.fail(f"{value!r} is not a tier; give 1, 2, 3 or one of {', '.join(TIERS)}",
                  param, ctx)

    def shell_complete(self, ctx, param, incomplete):
        from click.shell_completion import CompletionItem
        return [CompletionItem(t) for t in ("1", "2", "3", *TIERS) if t.startswith(incomplete)]


TIER = TierType()
