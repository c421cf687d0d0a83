"""``hypnos rpc-worker``: run llama.cpp's ``rpc-server`` on this machine, so that another
Hypnos can put layers of a model too large for it here (``[[hardware.rpc_workers]]``).

The worker is llama.cpp's own binary, built once per machine from the llama.cpp inside the
llama-cpp-python sdist Hypnos pins (the same RPC protocol as the engine), and cached
(``cli/llama_build.py``). This command builds or finds it and replaces itself with it.
"""
from __future__ import annotations

import ipaddress
import os

import click


def bind_problem(host: str, allow_public: bool) -> str | None:
    """Why ``host`` may not be bound without --allow-public: RPC has no authentication, so
    the worker listens on loopback or a private address only."""
    if allow_public:
        return None
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return f"--host must be an IP address, not {host!r}"
    if ip.is_unspecified:
        return (f"--host {host} listens on every interface; name a loopback or private "
                "address, or pass --allow-public")
    if not (ip.is_loopback or ip.is_private):
        return f"--host {host} is a public address; RPC has no authentication (--allow-public)"
    return None


@click.command("rpc-worker")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on: loopback or a private network address.")
@click.option("--port", type=click.IntRange(1, 65535), default=50052, show_default=True,
              help="Port to listen on.")
@click.option("--threads", type=click.IntRange(1), default=None,
              help="CPU threads of the worker (default: every CPU it may use).")
@click.option("--cache/--no-cache", default=False, show_default=True,
              help="Keep large tensors in the worker's local file cache, so a reload sends "
                   "only their hashes (rpc-server -c).")
@click.option("--allow-public", is_flag=True,
              help="Listen on a public or every address (the protocol has no "
                   "authentication: anyone who reaches the port can use the worker).")
@click.option("--build-only", is_flag=True,
              help="Build (or find) the rpc-server binary, print its path and exit.")
def rpc_worker(host: str, port: int, threads: int | None, cache: bool, allow_public: bool,
               build_only: bool) -> None:
    """Run llama.cpp's rpc-server as a Hypnos RPC worker (builds it the first time:
    minutes). Run workers only on a trusted network: the RPC protocol has no
    authentication and no encryption."""
    problem = bind_problem(host, allow_public)
    if problem and not build_only:
        raise click.UsageError(problem)
    from hypnos.cli.llama_build import rpc_server_binary
    try:
        binary = rpc_server_binary()
    except Exception as exc:  # noqa: BLE001 - a failed build is the user's to see
        raise click.ClickException(f"could not build llama.cpp's rpc-server: {exc}") from None
    if build_only:
        click.echo(str(binary))
        return
    args = [str(binary), "-H", host, "-p", str(port),
            "-t", str(threads or len(os.sched_getaffinity(0)))]
    if cache:
        args.append("-c")
    os.execv(str(binary), args)
