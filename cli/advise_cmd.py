"""``hypnos advise``: recommend a lineup and a config for a machine (offline; the same answer
as POST /v1/advisor).

Exit codes: 0 a lineup was found; 1 no lineup fits (the message names the need and the
shortfall); 2 a usage error (a bad size, an unknown need).
"""
from __future__ import annotations

import click

from hypnos.advisor import AdvisorError, NoLineupFits, advise as advise_lineup
from hypnos.catalog.catalog import NEEDS, load_catalog
from hypnos.cli.common import is_tty, print_json
from hypnos.cli.params import BYTE_SIZE, CommaList


def _this_machine() -> tuple[int | None, int, bool]:
    """(VRAM, RAM, unified) of this host: NVML for the GPU, /proc/meminfo and the cgroup
    limit for the RAM (service.hardware)."""
    from hypnos.service.scheduling.hardware import probe
    hw = probe()
    return hw.vram_bytes, hw.ram_bytes, hw.unified


def _gib(n: int) -> str:
    return f"{n / 1024**3:.2f} GiB"


def _print_table(body: dict) -> None:
    from rich.console import Console
    from rich.table import Table
    console = Console(no_color=not is_tty(), highlight=False, width=None if is_tty() else 120)
    m, b = body["machine"], body["budgets"]
    kind = ("unified memory" if m["unified_memory"] else
            f"{_gib(m['vram_bytes'])} VRAM" if m["vram_bytes"] else "CPU only")
    console.print(f"Machine: {kind}, {_gib(m['ram_bytes'])} RAM. Budgets: tier 1 "
                  f"{_gib(b['tier1_bytes'])}, tier 2 {_gib(b['tier2_bytes'])}.")
    table = Table(title="Recommended lineup")
    for col in ("model", "serves", "on", "GPU layers", "context x slots", "resident", "starts",
                "priority", "load s"):
        table.add_column(col)
    for x in body["models"]:
        layers = f"{x['gpu_layers']}/{x['num_layers']}" if x["num_layers"] else "-"
        if x["cpu_expert_layers"]:
            layers += f" ({x['cpu_expert_layers']} experts CPU)"
        ctx = f"{x['context_len']} x {x['slots']}" if x["context_len"] else "-"
        table.add_row(f"{x['id']}:{x['quant']}", ", ".join(x["serves"]),
                      "CPU" if x["runs_on_cpu"] else "GPU", layers, ctx,
                      _gib(x["resident_bytes"]), x["initial_tier"].split("_")[0], x["priority"],
                      f"{x['load_secs_cold']:g}")
    console.print(table)
    together = "yes" if body["interactive_coresident"] else "no"
    console.print(f"Interactive models resident together: {together} "
                  f"({_gib(body['interactive_bytes'])})")
    for w in body["warnings"]:
        console.print(f"warning: {w}")
    console.print("Fetch the weights: ./run.sh models " + " ".join(body["specs"]))
    console.print("The config file: the same command with --config")


@click.command("advise")
@click.option("--needs", required=True, type=CommaList(tuple(NEEDS)),
              help="Comma-separated: " + ", ".join(NEEDS) + " (voice = transcription + "
                   "chat + speech; agents = chat by a model that calls tools, with 32768 "
                   "tokens per slot for an agent CLI's prompt and answer).")
@click.option("--vram", type=BYTE_SIZE, default=None,
              help="GPU memory, e.g. 24G (default: this machine's; 0 = no GPU).")
@click.option("--ram", type=BYTE_SIZE, default=None,
              help="Host memory, e.g. 64G (default: this machine's).")
@click.option("--unified", is_flag=True,
              help="Unified memory (Apple Silicon): --ram is the shared pool, --vram ignored.")
@click.option("--json", "as_json", is_flag=True, help="Print the POST /v1/advisor body.")
@click.option("--config", "as_config", is_flag=True, help="Print only the config file.")
def advise(needs: list[str], vram: int | None, ram: int | None, unified: bool, as_json: bool,
           as_config: bool) -> None:
    """Recommend models, variants and settings from the catalog for a machine and needs."""
    if as_json and as_config:
        raise click.UsageError("--json and --config exclude each other")
    if ram is None or (vram is None and not unified):
        host_vram, host_ram, host_unified = _this_machine()
        ram = host_ram if ram is None else ram
        if vram is None and not unified:
            vram, unified = host_vram, host_unified
    try:
        body = advise_lineup(load_catalog(), needs, vram_bytes=vram, ram_bytes=ram,
                             unified_memory=unified)
    except NoLineupFits as exc:
        raise click.ClickException(str(exc)) from None
    except AdvisorError as exc:
        raise click.UsageError(str(exc)) from None
    if as_json:
        print_json(body)
    elif as_config:
        click.echo(body["config"], nl=False)
    else:
        _print_table(body)
