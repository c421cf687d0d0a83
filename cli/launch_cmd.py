"""``hypnos launch CLIENT``: run an agent CLI against a Hypnos server with a throwaway
environment and config (cli/launch/ holds the pieces)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import click

from hypnos.cli.client import Client, Unreachable
from hypnos.cli.common import config_option, resolve_config
from hypnos.cli.launch import agents, editors, save
from hypnos.cli.launch.choice import Needs, NoModel, choose
from hypnos.cli.launch.plan import DIR, Plan, Target, shell_script
from hypnos.cli.launch.server import (DEFAULT_CAP, DEFAULT_REQUEST_TIMEOUT, Local,
                                      StartedServer, idle_timeout_ms, is_loopback,
                                      local_server, read_facts)

CLIENTS = [*agents.BUILDERS, *editors.PRINT_ONLY]
EDITOR_NEEDS = Needs("the editor", 4_000, 8_192)


@click.command("launch", context_settings={"ignore_unknown_options": True})
@click.argument("client_name", metavar="CLIENT", type=click.Choice(CLIENTS))
@click.argument("client_args", metavar="[-- CLIENT_ARGS...]", nargs=-1, type=click.UNPROCESSED)
@click.option("--url", envvar="HYPNOS_URL", metavar="URL",
              help="Base URL of the server (HYPNOS_URL; default: the one the config serves on, "
                   "http://127.0.0.1:9999 without a config).")
@click.option("--api-key", envvar="HYPNOS_API_KEY", metavar="KEY",
              help="The server's API key (HYPNOS_API_KEY); the client gets it.")
@click.option("--model", metavar="ID", help="The model to use (default: the first chat model "
              "that calls tools and whose context holds the client's first prompt).")
@click.option("--serve", is_flag=True, help="Start `hypnos serve` when no server answers at "
              "a loopback URL, and stop it when the client exits.")
@click.option("--print", "print_only", is_flag=True,
              help="Print the environment and files as a shell script instead of running.")
@click.option("--save", "save_it", is_flag=True,
              help="Write the settings into the client's own config files (claude: "
                   "~/.claude/settings.json env; codex: ~/.codex/hypnos.config.toml, for "
                   "codex --profile hypnos; opencode: provider \"hypnos\" in "
                   "~/.config/opencode/opencode.json) instead of running.")
@config_option
def launch(client_name: str, client_args: tuple[str, ...], url: str | None,
           api_key: str | None, model: str | None, serve: bool, print_only: bool,
           save_it: bool, config_path: Path | None) -> None:
    """Run an agent CLI against Hypnos with a throwaway environment and config (nothing in
    your own config changes unless --save). The server is --url, HYPNOS_URL or the one the
    config serves on; the model one that calls tools and holds the client's first prompt.

    \b
    CLIENT and what it gets:
      claude     Claude Code: ANTHROPIC_BASE_URL, a token, the model for every alias,
                 its context and output limit (auto-compact at the served context),
                 a stream idle timeout sized from the measured prefill speed, no
                 traffic to Anthropic
      codex      Codex: a throwaway CODEX_HOME whose config.toml has a "hypnos"
                 provider (Responses wire API, HYPNOS_API_KEY), the model and its context
      opencode   opencode: OPENCODE_CONFIG naming an opencode.json with a "hypnos"
                 provider (@ai-sdk/openai-compatible) listing the chat models and limits
      continue, zed, open-webui
                 printed only: Continue's config.yaml models, Zed's settings.json
                 language model, Open WebUI's OpenAI connection variables

    \b
    Examples:
      hypnos launch claude
      hypnos launch claude -- -p "explain this repository"
      hypnos launch codex --model qwen2.5-coder:0.5b -- exec "fix the failing test"
      hypnos launch opencode --print > hypnos-opencode.sh
    """
    local = _local(config_path, explicit_url=url is not None)
    url = (url or local.url).rstrip("/")
    client = Client(url, api_key)
    started = None
    if not client.answers(timeout=3):
        if not serve or print_only:
            raise Unreachable(_no_server(url, config_path))
        if not is_loopback(url):
            raise click.ClickException(f"--serve starts a server on this machine only; {url} "
                                       "is not a loopback address")
        click.echo(f"hypnos launch: starting hypnos serve at {url} ...", err=True)
        started = StartedServer(config_path, url)
    try:
        plan, target = _plan(client_name, client, local, model)
        if print_only or client_name in editors.PRINT_ONLY:
            folder = str(launch_root() / client_name)
            click.echo(shell_script(plan, folder, has_key=bool(api_key)), nl=False)
            return
        if save_it:
            for line in save.save(client_name, target, api_key):
                click.echo(line)
            return
        code = _run(plan, client_args, api_key)
    finally:
        if started is not None:
            started.stop()
    sys.exit(code)


def _local(config_path: Path | None, explicit_url: bool) -> Local:
    """This machine's server settings; with --url given, a broken local config is ignored."""
    try:
        return local_server(resolve_config(config_path))
    except click.ClickException:
        if not explicit_url:
            raise
        return Local("", DEFAULT_CAP, DEFAULT_REQUEST_TIMEOUT)


def _no_server(url: str, config_path: Path | None) -> str:
    port = url.rsplit(":", 1)[-1].split("/")[0]
    command = "hypnos serve" + (f" --config {config_path}" if config_path else "") + \
        (f" --port {port}" if port.isdigit() and port != "9999" else "")
    return (f"no Hypnos server answers at {url}. Start one in another terminal:\n"
            f"  {command}\nor let launch start it (and stop it after): add --serve")


def _plan(client_name: str, client: Client, local: Local, model: str | None
          ) -> tuple[Plan, Target]:
    facts = read_facts(client)
    needs = agents.NEEDS.get(client_name, EDITOR_NEEDS)
    loopback = is_loopback(client.base)
    cap = local.max_tokens_cap if loopback else DEFAULT_CAP
    timeout_secs = local.request_timeout_secs if loopback else DEFAULT_REQUEST_TIMEOUT
    try:
        choice = choose(facts.models, needs, cap, named=model)
    except NoModel as exc:
        raise click.ClickException(str(exc)) from None
    for warning in choice.warnings:
        click.echo(f"warning: {warning}", err=True)
    chosen = choice.model
    listed = tuple(m for m in facts.models if m.tools or m.id == chosen.id)
    target = Target(client.base, chosen.id, listed, chosen.context, choice.output_tokens,
                    idle_timeout_ms(needs.prompt_tokens, facts.prefill_tps.get(chosen.id),
                                    timeout_secs),
                    thinking=chosen.thinking)
    build = agents.BUILDERS.get(client_name) or editors.PRINT_ONLY[client_name]
    return build(target), target


def launch_root() -> Path:
    """Where the throwaway folders go: the user's cache, not the temporary directory (Codex
    0.171 warns about a CODEX_HOME under $TMPDIR and makes no helper binaries there)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "hypnos" / "launch"


def _run(plan: Plan, client_args: tuple[str, ...], api_key: str | None) -> int:
    """Write the plan's files into a fresh temporary folder, run the client there with the
    plan's environment, remove the folder; the client's exit status."""
    program = shutil.which(plan.argv[0])
    if program is None:
        name, install = agents.INSTALL[plan.client]
        raise click.ClickException(f"{name} is not installed (or not on PATH): {install}")
    root = launch_root()
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{plan.client}-", dir=root) as folder:
        for rel, text in plan.files.items():
            path = Path(folder) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        env = {k: v for k, v in os.environ.items() if k not in plan.unset}
        env.update(plan.resolved_env(folder, api_key))
        # Ctrl-C belongs to the client (Claude Code cancels a turn with it): this process
        # ignores it while the client runs.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            argv = [a.replace(DIR, folder) for a in plan.argv[1:]]
            proc = subprocess.Popen([program, *argv, *client_args], env=env)
            return proc.wait()
        finally:
            signal.signal(signal.SIGINT, previous)
