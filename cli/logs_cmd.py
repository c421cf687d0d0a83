"""``hypnos logs``: the server's request log (spec section 15)."""
from __future__ import annotations

import json
import sys
import time

import click

from hypnos.cli.client import server_options
from hypnos.cli.common import json_option, print_json

LEVELS = ("off", "error", "warn", "info", "debug", "trace")


def record_line(r: dict) -> str:
    """One record on one line: when, status, route, model, time, tokens, error."""
    tokens = ""
    if r.get("tokens_in") is not None or r.get("tokens_out") is not None:
        tokens = f" {r.get('tokens_in') or 0}->{r.get('tokens_out') or 0} tok"
    switch = f" switch {r['tier_switch_ms']:.0f}ms" if r.get("tier_switch_ms") else ""
    err = f"  {r['error']}" if r.get("error") else ""
    dur = r.get("duration_ms")
    return (f"{r.get('started_at', '')} {r.get('status', '')} {r.get('method', '')} "
            f"{r.get('route', '')} {r.get('model') or '-'} "
            f"{'-' if dur is None else f'{dur:.0f}ms'}{tokens}{switch} {r.get('id', '')}{err}")


@click.group(invoke_without_command=True)
@server_options
@json_option
@click.option("--model", help="Only records of this model.")
@click.option("--route", help="Only records of this route, e.g. /v1/chat/completions.")
@click.option("--status", type=click.Choice(["ok", "error", "4xx", "5xx"]),
              help="Only successes, errors, client or server errors.")
@click.option("--key", help="Only records of this API key label.")
@click.option("--limit", type=click.IntRange(1), default=None, help="At most this many.")
@click.option("--follow", "-f", is_flag=True,
              help="Like tail -f: print the latest records (--limit, default 10) oldest first, "
                   "then keep polling and print new ones as they arrive.")
@click.option("--interval", type=click.FloatRange(0.1), default=1.0, show_default=True,
              help="Seconds between polls with --follow.")
@click.pass_context
def logs(ctx: click.Context, client, as_json: bool, model, route, status, key, limit,
         follow: bool, interval: float) -> None:
    """List the server's recent requests, newest first (GET /v1/logs). With --json the
    route's body; with --follow --json one record per line."""
    if ctx.invoked_subcommand is not None:
        return
    if follow and limit is None:
        limit = 10
    query = {"model": model, "route": route, "status": status, "key": key, "limit": limit}
    body = client.get("/v1/logs", params=query)
    if not follow:
        if as_json:
            print_json(body)
            return
        # Plain lines, never wrapped: people read them and scripts grep them.
        click.echo(f"level {body.get('level')}, {body.get('stored')} of "
                   f"{body.get('capacity')} stored")
        for r in body.get("records", []):
            click.echo(record_line(r))
        return
    _follow(client, query, body["records"], as_json, interval)


def _follow(client, query: dict, records: list[dict], as_json: bool, interval: float) -> None:
    """Print ``records`` (newest first, as the route answers) oldest first, then poll until
    interrupted; polling the log is not itself logged by the server. Stdout is flushed per
    record so a pipe sees each one at once."""
    seen: set[str] = set()
    try:
        while True:
            for r in reversed([r for r in records if r["id"] not in seen]):
                seen.add(r["id"])
                click.echo(json.dumps(r, ensure_ascii=False) if as_json else record_line(r))
                sys.stdout.flush()
            time.sleep(interval)
            records = client.get("/v1/logs", params=query).get("records", [])
    except KeyboardInterrupt:
        pass


@logs.command("show")
@click.argument("request_id")
@server_options
@json_option
def show(request_id: str, client, as_json: bool) -> None:
    """Show one record by its x-request-id (GET /v1/logs/{id})."""
    record = client.get(f"/v1/logs/{request_id}")
    if as_json:
        print_json(record)
        return
    for k, v in record.items():
        shown = json.dumps(v, ensure_ascii=False) if isinstance(v, (dict, list)) else v
        click.echo(f"{k}: {shown}")


@logs.command("clear")
@server_options
@json_option
def clear(client, as_json: bool) -> None:
    """Empty the request log (DELETE /v1/logs)."""
    answer = client.delete("/v1/logs")
    if as_json:
        print_json(answer)
    else:
        click.echo("cleared")


@logs.command("level")
@click.argument("level", type=click.Choice(LEVELS))
@server_options
@json_option
def level(level: str, client, as_json: bool) -> None:
    """Set what the next calls capture: off, error, warn, info, debug (input and output) or
    trace (the payloads too) (POST /v1/logs/level)."""
    answer = client.post("/v1/logs/level", {"level": level})
    if as_json:
        print_json(answer)
    else:
        click.echo(f"level {answer['level']}")
