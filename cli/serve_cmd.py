"""``hypnos serve``: one Sanic process that owns the models."""
from __future__ import annotations

import asyncio
import errno
import logging
import socket
import sys

import click

from hypnos.cli.common import config_option, resolve_config


def _default_lineup(cfg, catalog):
    from hypnos.service.config.lineup import default_lineup_config
    lineup = default_lineup_config(catalog, cfg.models_dir)
    lineup.server, lineup.limits, lineup.hardware = cfg.server, cfg.limits, cfg.hardware
    return lineup


def _pull_missing(cfg, catalog):
    """Fetch the default lineup's missing files (runs in a thread while the port is open)."""
    from hypnos.catalog.pull import PullError, pull_variant
    log = logging.getLogger("hypnos.serve")
    for entry in catalog.lineup():
        try:
            result = pull_variant(entry, entry.default_variant(), cfg.models_dir)
            if result.fetched:
                log.info("pulled %s: %s", entry.id, ", ".join(result.fetched))
        except PullError as exc:
            log.warning("could not pull %s: %s", entry.id, exc)


@click.command()
@config_option
@click.option("--host", help="Address to bind (default from config: 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), help="Port (default 9999; HYPNOS_PORT).")
@click.option("--check", is_flag=True,
              help="Build the app, answer one in-process GET /v1/models, exit non-zero on failure.")
@click.option("--no-playground", is_flag=True,
              help="Do not serve the playground web page at / (server.playground = false).")
@click.option("--watch-config", is_flag=True,
              help="Apply [[models]] edits of the config file while serving (same checks as "
                   "POST/PUT/DELETE /v1/models); a bad edit is logged and refused.")
def serve(config_path, host, port, check: bool, no_playground: bool, watch_config: bool) -> None:
    """Start the server. With no config file it serves the default lineup from the catalog,
    pulling what is missing from models_dir first. The playground, a web page for trying
    every model and watching the tiers, is at http://HOST:PORT/."""
    if not check:
        from hypnos.cli.malloc_thp import reexec_with_thp
        reexec_with_thp()            # huge pages for the KV caches (cli/malloc_thp.py)
    from hypnos.catalog.catalog import load_catalog
    from hypnos.service.app import create_app
    from hypnos.service.lifecycle.shutdown import install_drain
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if not check:
        from hypnos.service.scheduling.allocator import cap_arenas
        cap_arenas()                 # before threads start (service/scheduling/allocator.py)
    cfg = resolve_config(config_path, host=host, port=port)
    if no_playground:
        cfg.server.playground = False
    catalog = load_catalog()
    before_stage = None
    if cfg.source is None and not cfg.models:
        cfg = _default_lineup(cfg, catalog)
        before_stage = (lambda: _pull_missing(cfg, catalog)) if not check else None
    if check:
        sys.exit(_check(create_app(cfg, catalog=catalog, stage=False)))
    if watch_config and cfg.source is None:
        raise click.UsageError("--watch-config needs a config file (--config or ./hypnos.toml)")
    _exit_unless_listenable(cfg.server.host, cfg.server.port)
    app = create_app(cfg, catalog=catalog, before_stage=before_stage)
    install_drain(app)
    if watch_config:
        from hypnos.service.lifecycle.config_watch import install_config_watch
        install_config_watch(app, cfg.source)
    ssl = None
    if cfg.server.tls is not None:
        ssl = {"cert": cfg.server.tls.cert, "key": cfg.server.tls.key}
    _log_through_root()
    try:
        app.run(host=cfg.server.host, port=cfg.server.port, single_process=True,
                access_log=False, motd=False, ssl=ssl)
    except OSError as exc:
        # Taken between the check above and Sanic's own bind (or a bind error it alone sees).
        if not _is_bind_error(exc):
            raise
        _cannot_listen(cfg.server.host, cfg.server.port, exc)


# Sanic's loggers; constructing a Sanic app gives each its own stream handler
# (LOGGING_CONFIG_DEFAULTS), and they also propagate to the root logger.
_SANIC_LOGGERS = ("sanic.root", "sanic.error", "sanic.server", "sanic.websockets",
                  "sanic.access")


def _log_through_root() -> None:
    """Every Sanic line once, in our format: drop Sanic's own handlers so its records reach
    only the root logger's (logging.basicConfig above). Without this, "Worker ready" and the
    like were printed twice, once per format."""
    for name in _SANIC_LOGGERS:
        lg = logging.getLogger(name)
        for handler in list(lg.handlers):
            lg.removeHandler(handler)
        lg.propagate = True


def _listen_problem(exc: OSError) -> str:
    """What a failed bind means for someone starting the server, and what to change."""
    if isinstance(exc, socket.gaierror):
        return "the host does not resolve (check --host or server.host)"
    if exc.errno == errno.EADDRINUSE:
        return "address already in use (another server? pick another with --port)"
    if exc.errno == errno.EACCES:
        return "permission denied (ports below 1024 need privileges; pick another with --port)"
    if exc.errno == errno.EADDRNOTAVAIL:
        return "not an address of this machine (check --host or server.host)"
    return exc.strerror or str(exc)


def _is_bind_error(exc: OSError) -> bool:
    """A bind's error, worded by _listen_problem; any other OSError from app.run (a startup
    listener's missing file, say) keeps its traceback."""
    return isinstance(exc, socket.gaierror) or (
        exc.filename is None and exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL))


def _cannot_listen(host: str, port: int, exc: OSError):
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    click.echo(f"hypnos: cannot listen on {where}: {_listen_problem(exc)}", err=True)
    sys.exit(1)


def _exit_unless_listenable(host: str, port: int) -> None:
    """Bind (and release) the address the way Sanic will, before any model is loaded, so a
    port in use or a host that does not resolve is one line and exit 1, not a traceback."""
    from sanic.server.socket import bind_socket
    try:
        bind_socket(host, port).close()
    except OSError as exc:
        _cannot_listen(host, port, exc)


def _check(app) -> int:
    from sanic_testing.testing import SanicASGITestClient

    async def probe():
        # In process, as a loopback caller: the browser layer answers loopback Host names.
        client = SanicASGITestClient(app)
        _req, resp = await client.get("/v1/models", headers={"host": "127.0.0.1"})
        return resp
    resp = asyncio.run(probe())
    if resp.status != 200:
        click.echo(f"check failed: GET /v1/models answered {resp.status}: {resp.text}", err=True)
        return 1
    models = resp.json["data"]
    problems = [st.problem for st in app.ctx.scheduler.models.values() if st.problem]
    for p in problems:
        click.echo(f"problem: {p}", err=True)
    click.echo(f"ok: {len(models)} models configured")
    return 1 if problems else 0
