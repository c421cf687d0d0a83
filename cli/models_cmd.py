"""``hypnos models list|pull`` and ``hypnos catalog-block``: offline catalog tools."""
from __future__ import annotations

import click

from hypnos.catalog.blocks import config_block
from hypnos.catalog.catalog import CatalogError, load_catalog, optional_features
from hypnos.catalog.pull import PullError, plan, pull_variant
from hypnos.catalog.state import catalog_wire
from hypnos.cli.client import server_options
from hypnos.cli.common import (config_option, console, is_tty, json_option, print_json,
                               resolve_config)


def _resolve(catalog, spec: str):
    try:
        return catalog.resolve(spec)
    except CatalogError as exc:
        raise click.BadParameter(str(exc), param_hint="SPEC") from None


@click.command("catalog-block")
@click.argument("spec")
def catalog_block(spec: str) -> None:
    """Print the [[models]] config block for SPEC (<id> or <id>:<quant>)."""
    entry, variant = _resolve(load_catalog(), spec)
    click.echo(config_block(entry, variant), nl=False)


@click.group()
def models() -> None:
    """The model pool of a server and the catalog: list, pull, add, replace, remove,
    enable, disable, moe-offload."""


@models.command("list")
@config_option
@json_option
@click.option("--modality", help="Only models (or entries) serving this modality.")
@click.option("--catalog", "catalog_only", is_flag=True,
              help="Show the catalog even when a server answers.")
@server_options
def list_models(config_path, as_json: bool, modality: str | None, catalog_only: bool,
                client) -> None:
    """Show the server's model pool when a server answers at --url, else the catalog with
    what is installed in models_dir. --json adds "source": "server" or "catalog"."""
    if not catalog_only and client.answers():
        _list_pool(client, as_json, modality)
        return
    cfg = resolve_config(config_path)
    configured = {m.id: (m.enabled, m.weights_path) for m in cfg.models}
    body = catalog_wire(load_catalog(), cfg.models_dir, modality=modality, configured=configured)
    if as_json:
        print_json({"source": "catalog", **body})
        return
    from rich.table import Table
    table = Table(title=f"Catalog (models_dir: {cfg.models_dir})")
    for col in ("id", "modality", "engine", "variants", "installed", "lineup"):
        table.add_column(col)
    for e in body["data"]:
        quants = ", ".join(f"{v['quant']}{'*' if v['default'] else ''}" for v in e["variants"])
        installed = ", ".join(v["quant"] for v in e["variants"] if v["installed"]) or "-"
        table.add_row(e["id"], e["modality"], e["engine"], quants, installed,
                      "yes" if e["lineup"] else "")
    console().print(table)


def _list_pool(client, as_json: bool, modality: str | None) -> None:
    """The pool from GET /v1/memory/status: disabled models too, with every modality."""
    pool = [m for m in client.get("/v1/memory/status")["models"]
            if modality is None or modality in m.get("modalities", [m.get("modality")])]
    if as_json:
        print_json({"source": "server", "url": client.base, "data": pool})
        return
    from rich.table import Table
    table = Table(title=f"Model pool of {client.base}")
    for col in ("id", "serves", "engine", "tier", "GPU layers", "enabled", "leases", "served"):
        table.add_column(col)
    for m in pool:
        p = m.get("placement", {})
        table.add_row(m["id"], ", ".join(m.get("modalities", [])), m.get("engine", ""),
                      m.get("current_tier", "").split("_")[0], str(p.get("gpu_layers", 0)),
                      "yes" if m.get("enabled", True) else "no", str(m.get("active_leases", 0)),
                      str(m.get("total_requests_served", 0)))
    console().print(table)


@models.command("pull")
@click.argument("specs", nargs=-1, required=True)
@config_option
@json_option
@click.option("--force", is_flag=True,
              help="Download again even when present, and download entries the pinned "
                   "engine cannot run yet.")
@click.option("--dry-run", is_flag=True,
              help="List the exact files, sizes, sha256s and URLs; download nothing.")
@click.option("--mtp", is_flag=True,
              help="Also fetch the variant's MTP draft head, where the catalog lists one "
                   "(for speculative = \"mtp\").")
def pull(specs, config_path, as_json: bool, force: bool, dry_run: bool, mtp: bool) -> None:
    """Download catalog variants (<id> or <id>:<quant>) into models_dir. An entry the pinned
    engine cannot run yet (it needs a newer llama.cpp) is refused, exit 1, unless --force."""
    cfg = resolve_config(config_path)
    catalog = load_catalog()
    resolved = [_resolve(catalog, s) for s in specs]
    optional = optional_features("mtp") if mtp else ()
    if dry_run:
        _print_plan(catalog, resolved, cfg.models_dir, as_json, optional)
        return
    for entry, _variant in resolved:
        reason = catalog.unsupported_reason(entry)
        if reason and not force:
            raise click.ClickException(f"{reason} (--force downloads it anyway)")
    results = []
    for entry, variant in resolved:
        try:
            with _progress(as_json) as progress:
                results.append(pull_variant(entry, variant, cfg.models_dir,
                                            progress=progress, force=force,
                                            optional=optional))
        except PullError as exc:
            if as_json:
                print_json({"error": str(exc), "done": [r.to_dict() for r in results]})
            raise click.ClickException(str(exc)) from None
        if not as_json:
            r = results[-1]
            click.echo(f"{r.spec}: {len(r.fetched)} fetched, {len(r.skipped)} already present "
                       f"in {r.models_dir}")
    if as_json:
        print_json({"pulled": [r.to_dict() for r in results]})


def _print_plan(catalog, resolved, models_dir, as_json: bool, optional=()) -> None:
    out = []
    for entry, variant in resolved:
        rows = plan(entry, variant, models_dir, optional)
        item = {"spec": f"{entry.id}:{variant.quant}", "models_dir": str(models_dir),
                "files": rows, "size_bytes": variant.size_bytes}
        if variant.size_note:
            item["size_note"] = variant.size_note
        reason = catalog.unsupported_reason(entry)
        if reason:
            item["unsupported"] = reason
        out.append(item)
    if as_json:
        print_json({"dry_run": out})
        return
    for item in out:
        total = "" if item.get("size_note") else f", {item['size_bytes']} bytes"
        click.echo(f"{item['spec']} -> {item['models_dir']}{total}")
        if item.get("unsupported"):
            click.echo(f"  refused without --force: {item['unsupported']}")
        for r in item["files"]:
            size = r["size"] if r["size"] is not None else "size not confirmed"
            state = " (present)" if r["present"] else ""
            click.echo(f"  {r['role']:8} {r['local']}  {size}{state}\n"
                       f"           {r['url']}\n"
                       f"           sha256 {r['sha256'] or 'not published'}"
                       + ("\n           gated: accept the license on the hub, set HF_TOKEN"
                          if r["gated"] else ""))


class _progress:
    """A rich progress bar on a TTY; nothing otherwise (scripts and --json stay quiet)."""

    def __init__(self, quiet: bool):
        self.enabled = is_tty() and not quiet
        self.bar = None
        self.tasks: dict = {}

    def __enter__(self):
        if not self.enabled:
            return None
        from rich.progress import Progress
        self.bar = Progress()
        self.bar.start()
        return self.update

    def update(self, name: str, done: int, total: int | None) -> None:
        if name not in self.tasks:
            self.tasks[name] = self.bar.add_task(name, total=total)
        self.bar.update(self.tasks[name], completed=done)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
