"""``hypnos ready``: whether a server has staged its startup models (GET /ready), for scripts
that start one and wait for it."""
from __future__ import annotations

import time

import click

from hypnos.cli.client import ServerSaidNo, Unreachable, server_options
from hypnos.cli.common import json_option, print_json


@click.command("ready")
@click.option("--wait", "wait_secs", type=click.FloatRange(0), default=0, show_default=True,
              help="Keep asking for up to this many seconds (also while the port is closed).")
@server_options
@json_option
def ready(wait_secs: float, client, as_json: bool) -> None:
    """Exit 0 once the server is ready; 1 while it is still staging (GET /ready answers 503),
    3 when nothing answers at --url."""
    client.echo_errors = False
    deadline = time.monotonic() + wait_secs
    while True:
        try:
            body = client.get("/ready", timeout=5)
            break
        except (ServerSaidNo, Unreachable) as exc:
            if time.monotonic() >= deadline:
                raise exc from None
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    if as_json:
        print_json(body)
    else:
        click.echo("ready")
