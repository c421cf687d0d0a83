"""The ``hypnos`` command group. Commands are thin: parse, call the library, render.

Exit codes: 0 success; 1 the command ran and failed (no lineup fits, a pull failed, the
server answered an error: its message is printed as it is); 2 usage error (bad option value,
unknown need or model spec); 3 the server cannot be reached.
"""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import click

from hypnos.cli.advise_cmd import advise
from hypnos.cli.bench_cmd import bench
from hypnos.cli.chat_cmd import chat
from hypnos.cli.fleet_cmd import fleet_config
from hypnos.cli.launch_cmd import launch
from hypnos.cli.logs_cmd import logs
from hypnos.cli.models_cmd import catalog_block, models
from hypnos.cli.pool_cmd import POOL_COMMANDS
from hypnos.cli.ready_cmd import ready
from hypnos.cli.rpc_cmd import rpc_worker
from hypnos.cli.serve_cmd import serve
from hypnos.cli.tier_cmd import tier


def _version() -> str:
    try:
        return version("hypnos")
    except PackageNotFoundError:
        return "0.0.0"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(_version(), prog_name="hypnos")
def cli() -> None:
    """Hypnos: a local inference server for models of every modality."""


cli.add_command(serve)
cli.add_command(chat)
cli.add_command(advise)
cli.add_command(models)
cli.add_command(catalog_block)
cli.add_command(ready)
cli.add_command(tier)
cli.add_command(logs)
cli.add_command(bench)
cli.add_command(rpc_worker)
cli.add_command(fleet_config)
cli.add_command(launch)
for _command in POOL_COMMANDS:
    models.add_command(_command)


def main() -> None:
    cli(prog_name="hypnos")
