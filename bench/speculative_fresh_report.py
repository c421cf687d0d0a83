"""The figures of ``speculative.py --fresh``, pure: one request's reading (``ask_of``), a
prompt's medians and ratios (``PromptResult``), geometric means per kind and family with the
issue's verdicts (``summarize``), and the printed tables. No server, no model."""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field

from hypnos.bench.speculative_fresh_prompts import FAMILIES, HALVES, FreshPrompt

#: family -> the least ratio to ``off`` every prompt of it should reach (issue #39: at most
#: 3 % slower where nothing is copied, at least 1.3x faster where the answer copies).
TARGETS: dict[str, float] = {"plain": 0.97, "copying": 1.3}
#: The ratios judged: (config, the config it is divided by).
PAIRS: tuple[tuple[str, str], ...] = (("default", "off"), ("auto", "off"))


@dataclass(frozen=True)
class Ask:
    """One measured request: completion ``tokens``, ``wall_s`` seconds from the request's
    first byte sent to the answer's last byte received, the server's own ``decode_rate``
    (tokens/s), and its speculation (``method`` "" when it reported none)."""
    tokens: int
    wall_s: float
    decode_rate: float
    method: str = ""
    drafted: int = 0
    accepted: int = 0

    @property
    def rate(self) -> float:
        """Completion tokens per second of wall time, as a client sees it."""
        return self.tokens / self.wall_s


def ask_of(reply: dict, wall_s: float) -> Ask:
    """One chat completion's figures: Hypnos's (``hypnos_telemetry``) or llama-server's
    (``timings``)."""
    tokens = reply["usage"]["completion_tokens"]
    if "timings" in reply:
        t = reply["timings"]
        return Ask(tokens, wall_s, t["predicted_per_second"],
                   "draft" if t.get("draft_n") else "", t.get("draft_n", 0),
                   t.get("draft_n_accepted", 0))
    telemetry = reply["hypnos_telemetry"]
    spec = telemetry.get("speculative") or {}
    return Ask(tokens, wall_s, telemetry["engine"]["decode_tokens_per_s"],
               spec.get("method", ""), spec.get("drafted", 0), spec.get("accepted", 0))


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def geomean(values: list[float]) -> float | None:
    """The geometric mean of positive ``values``; None for none."""
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def verdict(ratios: list[float], family: str) -> str | None:
    """"PASS" when every ratio reaches the family's target, else "MISS"; None for none."""
    if not ratios:
        return None
    return "PASS" if min(ratios) >= TARGETS[family] else "MISS"


@dataclass
class PromptResult:
    """One prompt's measured asks, config -> the ``--runs`` asks (in run order)."""
    prompt: FreshPrompt
    asks: dict[str, list[Ask]] = field(default_factory=dict)

    def rate(self, config: str, decode: bool = False) -> float | None:
        """The median over runs of the client-side rate (``decode``: the server's own)."""
        asks = self.asks.get(config)
        if not asks:
            return None
        return statistics.median(a.decode_rate if decode else a.rate for a in asks)

    def ratio(self, config: str, base: str = "off", decode: bool = False) -> float | None:
        return ratio(self.rate(config, decode), self.rate(base, decode))

    def drafts(self, config: str) -> tuple[int, int]:
        """(drafted, accepted) over all runs."""
        asks = self.asks.get(config, [])
        return sum(a.drafted for a in asks), sum(a.accepted for a in asks)

    def to_json(self) -> dict:
        p = self.prompt
        return {"name": p.name, "family": p.family, "kind": p.kind, "half": p.half,
                "rates": {c: self.rate(c) for c in self.asks},
                "decode_rates": {c: self.rate(c, decode=True) for c in self.asks},
                "ratios": {f"{a}/{b}": self.ratio(a, b) for a, b in PAIRS},
                "decode_ratios": {f"{a}/{b}": self.ratio(a, b, True) for a, b in PAIRS},
                "asks": {c: [asdict(a) for a in asks] for c, asks in self.asks.items()}}


@dataclass(frozen=True)
class GroupFigure:
    """One kind's or family's ratios of ``pair`` on one half: how many prompts had both
    figures, their geometric mean, the least, and the family's verdict."""
    group: str
    family: str
    half: str
    pair: str
    count: int
    geomean: float | None
    least: float | None
    verdict: str | None


def summarize(results: list[PromptResult]) -> list[GroupFigure]:
    """Every kind, then every family, each half apart, for every pair of ``PAIRS`` (groups
    without a prompt left out)."""
    groups = [(kind, family, lambda p, k=kind: p.kind == k)
              for family, kinds in FAMILIES.items() for kind in kinds]
    groups += [(family, family, lambda p, f=family: p.family == f) for family in FAMILIES]
    out = []
    for group, family, member in groups:
        for half in HALVES:
            chosen = [r for r in results if member(r.prompt) and r.prompt.half == half]
            if not chosen:
                continue
            for a, b in PAIRS:
                ratios = [x for x in (r.ratio(a, b) for r in chosen) if x is not None]
                out.append(GroupFigure(group, family, half, f"{a}/{b}", len(ratios),
                                       geomean(ratios), min(ratios, default=None),
                                       verdict(ratios, family)))
    return out


def fmt(value: float | None, width: int = 6, digits: int = 1) -> str:
    return f"{value:{width}.{digits}f}" if value is not None else f"{'-':>{width}}"


def print_table(results: list[PromptResult], configs: list[str]) -> None:
    """One line a prompt: each config's client-side rate, the ratios to off (client-side and
    the servers' decode rates), the drafts accepted, and the prompt's verdicts."""
    head = " ".join(f"{c[:12]:>12}" for c in configs)
    print(f"\n{'kind':11} {'half':4} {'prompt':30} {head}  def/off auto/off  "
          f"dec:def/off auto/off  drafts accepted/drafted (runs summed)  verdict def auto")
    for r in results:
        p = r.prompt
        slug = p.name.partition("/")[2]
        rates = " ".join(fmt(r.rate(c), 12) for c in configs)
        drafts = "  ".join(f"{c} {acc}/{dr}" for c in configs
                           for dr, acc in [r.drafts(c)] if dr)
        verdicts = [verdict([x], p.family) if x is not None else None
                    for x in (r.ratio(a, b) for a, b in PAIRS)]
        print(f"{p.kind:11} {p.half:4} {slug:30} {rates}  "
              f"{fmt(r.ratio('default'), 7, 2)} {fmt(r.ratio('auto'), 8, 2)}  "
              f"{fmt(r.ratio('default', decode=True), 11, 2)} "
              f"{fmt(r.ratio('auto', decode=True), 7, 2)}  {drafts or '-':38} "
              f"{verdicts[0] or '-':>7} {verdicts[1] or '-':>4}")


def print_summary(figures: list[GroupFigure]) -> None:
    targets = "; ".join(f"{f} >= {t}x off on every prompt" for f, t in TARGETS.items())
    print(f"\nratios to off (client-side tokens/s), geometric mean and least per kind and "
          f"family, tune and held halves apart; targets: {targets}")
    print(f"{'group':11} {'half':4} {'pair':12} {'n':>2} {'geomean':>7} {'least':>6}  verdict")
    for f in figures:
        print(f"{f.group:11} {f.half:4} {f.pair:12} {f.count:2d} {fmt(f.geomean, 7, 2)} "
              f"{fmt(f.least, 6, 2)}  {f.verdict or '-'}")
