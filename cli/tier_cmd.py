"""``hypnos tier``: the three memory tiers of a running server, moving a model, KV parking
(spec section 14)."""
from __future__ import annotations

import json
import time

import click

from hypnos.cli.client import server_options
from hypnos.cli.common import complete_model_ids, console, is_tty, json_option, print_json
from hypnos.cli.params import BYTE_SIZE, TIER


@click.group(invoke_without_command=True)
@server_options
@json_option
@click.option("--watch", is_flag=True, help="Refresh the picture until interrupted.")
@click.option("--interval", type=click.FloatRange(0.1), default=2.0, show_default=True,
              help="Seconds between refreshes with --watch.")
@click.option("--count", type=click.IntRange(1), default=None,
              help="With --watch: stop after this many pictures.")
@click.pass_context
def tier(ctx: click.Context, client, as_json: bool, watch: bool, interval: float,
         count: int | None) -> None:
    """Show the three tiers: booked vs real bytes per tier, each model in its tier with its
    layers and leases, the recent evictions (GET /v1/memory/status). With --json the status
    body; with --json --watch one body per line."""
    if ctx.invoked_subcommand is not None:
        return
    from hypnos.cli.tier_view import tier_picture
    if not watch:
        status = client.get("/v1/memory/status")
        if as_json:
            print_json(status)
        else:
            console().print(tier_picture(status))
        return
    shown = 0

    def snapshots():
        nonlocal shown
        while count is None or shown < count:
            if shown:
                time.sleep(interval)
            shown += 1
            yield client.get("/v1/memory/status")
    try:
        if as_json:
            for status in snapshots():
                click.echo(json.dumps(status, ensure_ascii=False), nl=True)
        elif is_tty():
            from rich.live import Live
            with Live(auto_refresh=False, console=console()) as live:
                for status in snapshots():
                    live.update(tier_picture(status), refresh=True)
        else:
            out = console()
            for status in snapshots():
                out.print(tier_picture(status))
                out.print(f"--- {time.strftime('%H:%M:%S')}")
    except KeyboardInterrupt:
        pass


@tier.command("move")
@click.argument("model", shell_complete=complete_model_ids)
@click.argument("target", metavar="TIER", type=TIER)
@click.option("--context", "context_len", type=click.IntRange(1), default=None,
              help="Context window (across all slots) the tier-1 placement must fund at least.")
@server_options
@json_option
def move(model: str, target: str, context_len: int | None, client, as_json: bool) -> None:
    """Move MODEL to TIER (1, 2, 3 or tier1_gpu_vram, tier2_pinned_ram, tier3_nvme_ssd);
    blocks while a promotion loads (POST /v1/memory/tier)."""
    body = {"model": model, "target_tier": target}
    if context_len is not None:
        body["context_len"] = context_len
    started = time.perf_counter()
    answer = client.post("/v1/memory/tier", body)
    if as_json:
        print_json(answer)
        return
    p = answer.get("placement", {})
    click.echo(f"{answer['model']}: {p.get('primary_tier', target)}, "
               f"{p.get('gpu_layers', 0)} GPU layers, context "
               f"{p.get('allocated_context_len', 0)} ({time.perf_counter() - started:.2f} s)")


@tier.command("kv-park")
@click.option("--enable/--disable", "enabled", default=None,
              help="Turn KV parking on or off (not written to the config).")
@click.option("--max-bytes", type=BYTE_SIZE, default=None,
              help="Cap on the host memory parked KV states may hold (with the prompt "
              "cache: its RAM tier), e.g. 4G.")
@server_options
@json_option
def kv_park(enabled: bool | None, max_bytes: int | None, client, as_json: bool) -> None:
    """Show KV parking, or change it with --enable/--disable and --max-bytes
    (GET and POST /v1/memory/kv-park)."""
    body = {k: v for k, v in (("enabled", enabled), ("max_bytes", max_bytes)) if v is not None}
    state = client.post("/v1/memory/kv-park", body) if body else client.get("/v1/memory/kv-park")
    if as_json:
        print_json(state)
        return
    from hypnos.cli.tier_view import gib
    click.echo(f"KV parking {'on' if state['enabled'] else 'off'}: "
               f"{gib(state['used_bytes'])} used of {gib(state['max_bytes'])}")
    for m in state.get("models", []):
        click.echo(f"  {m['model']}: {m['slots']} slots, {m['tokens']} tokens, "
                   f"{gib(m['bytes'])}, parked {m['parked_secs_ago']:.0f} s ago")
