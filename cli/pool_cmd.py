"""``hypnos models add|replace|remove|enable|disable|moe-offload``: the live model pool of a
running server (spec section 6). Adding, replacing and removing need an admin key when the
server has keys."""
from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import quote

import click

from hypnos.cli.client import server_options
from hypnos.cli.common import complete_model_ids, json_option, print_json


def _complete_catalog(ctx, param, incomplete: str):
    from hypnos.catalog.catalog import load_catalog
    return [e.id for e in load_catalog().entries if e.id.startswith(incomplete)]


def _model_body(spec: str | None, block_file: str | None) -> dict:
    """The POST/PUT body: {"catalog": spec} or {"config": <one [[models]] block>}."""
    if (spec is None) == (block_file is None):
        raise click.UsageError("give either a catalog SPEC or --config-block FILE")
    if spec is not None:
        return {"catalog": spec}
    text = sys.stdin.read() if block_file == "-" else Path(block_file).read_text()
    return {"config": text}


def _model_path(model_id: str, action: str = "") -> str:
    return f"/v1/models/{quote(model_id, safe=':')}{action}"


def _report(answer: dict, as_json: bool) -> None:
    """``<model>: added`` / ``replaced`` / ``removed`` / ``enabled`` / ``disabled`` /
    ``moe_offload=auto (applies now)``, or the route's body with --json."""
    if as_json:
        print_json(answer)
        return
    if "moe_offload" in answer:
        what = f"moe_offload={answer['moe_offload']} (applies {answer.get('applies')})"
    elif "enabled" in answer:
        what = "enabled" if answer["enabled"] else "disabled"
    else:
        what = answer.get("action", "done")
    if answer.get("persisted") is False:
        what += " (not persisted: the overlay could not be written)"
    click.echo(f"{answer['model']}: {what}")


block_option = click.option(
    "--config-block", "block_file", type=click.Path(allow_dash=True, dir_okay=False),
    help="A file holding one [[models]] block (paths relative to models_dir); - reads stdin.")
drain_option = click.option(
    "--drain-secs", type=click.IntRange(0), default=None,
    help="How long running requests may take to finish before the change is refused "
         "(server default 120).")


@click.command("add")
@click.argument("spec", required=False, shell_complete=_complete_catalog)
@block_option
@server_options
@json_option
def add(spec, block_file, client, as_json: bool) -> None:
    """Add a model to the server's pool: a catalog SPEC (<id> or <id>:<quant>, its files
    already pulled) or a --config-block. It starts cold in tier 3 (POST /v1/models)."""
    _report(client.post("/v1/models", _model_body(spec, block_file)), as_json)


@click.command("replace")
@click.argument("model", shell_complete=complete_model_ids)
@click.argument("spec", required=False, shell_complete=_complete_catalog)
@block_option
@drain_option
@server_options
@json_option
def replace(model, spec, block_file, drain_secs, client, as_json: bool) -> None:
    """Replace MODEL with a catalog SPEC or a --config-block under the same id; requests
    meanwhile wait for the new one (PUT /v1/models/{id})."""
    body = _model_body(spec, block_file)
    if drain_secs is not None:
        body["drain_secs"] = drain_secs
    _report(client.put(_model_path(model), body), as_json)


@click.command("remove")
@click.argument("model", shell_complete=complete_model_ids)
@drain_option
@server_options
@json_option
def remove(model, drain_secs, client, as_json: bool) -> None:
    """Remove MODEL from the pool once its running requests finish (DELETE /v1/models/{id})."""
    _report(client.delete(_model_path(model), params={"drain_secs": drain_secs}), as_json)


@click.command("enable")
@click.argument("model", shell_complete=complete_model_ids)
@server_options
@json_option
def enable(model, client, as_json: bool) -> None:
    """Put a disabled MODEL back in service; it loads on its next request."""
    _report(client.post(_model_path(model, "/enable")), as_json)


@click.command("disable")
@click.argument("model", shell_complete=complete_model_ids)
@server_options
@json_option
def disable(model, client, as_json: bool) -> None:
    """Take MODEL out of service: evicted to disk, hidden from /v1/models, requests get 404
    model_disabled. Refused (exit 1, 429 model_busy) while it is leased."""
    _report(client.post(_model_path(model, "/disable")), as_json)


@click.command("moe-offload")
@click.argument("model", shell_complete=complete_model_ids)
@click.argument("mode", type=click.Choice(["off", "auto", "on"]))
@server_options
@json_option
def moe_offload(model, mode, client, as_json: bool) -> None:
    """Set MODEL's Mixture-of-Experts expert offload: off, auto (only when it does not fit
    the GPU whole) or on (every layer's experts on the CPU). Not persisted."""
    _report(client.post(_model_path(model, "/moe-offload"), {"mode": mode}), as_json)


POOL_COMMANDS = (add, replace, remove, enable, disable, moe_offload)
