"""``hypnos fleet-config``: a LiteLLM proxy config for several Hypnos nodes, from what each
node serves (its ``GET /v1/models``).

LiteLLM's proxy routes an OpenAI request on its ``model`` field to the deployments listed
under that ``model_name``, with no code of ours: one route per model id, every node that
serves the id a deployment of it (load-balanced, ``simple-shuffle``). A node that fails a
request (refused connection, 5xx) is retried on another deployment of the same id
(``num_retries``) and cooled down for ``cooldown_time`` seconds (``allowed_fails``: 0, so
the first failure counts). LiteLLM's own active health checks send real completions (they
would load models on the nodes), so the config leaves them off; ``/ready`` is checked here,
when the config is written, and a node that is not ready is reported.

LiteLLM runs in a virtual environment of its own (``--install-proxy``), kept once per
machine under the build cache (``cli/llama_build.py``): its dependencies (FastAPI, an older
rich, ...) must not change the versions Hypnos runs with.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click

from hypnos.cli.client import Client, ServerSaidNo, Unreachable
from hypnos.cli.common import json_option, print_json

LITELLM = "litellm[proxy]==1.108.0"


def proxy_venv(root: Path | None = None) -> Path:
    from hypnos.cli.llama_build import cache_root
    return (root or cache_root()) / f"litellm-{LITELLM.split('==')[1]}"


def install_proxy(root: Path | None = None) -> Path:
    """The ``litellm`` command of the cached proxy venv, created first when missing (a
    minute or two from PyPI). Blocks."""
    venv = proxy_venv(root)
    done = venv / ".hypnos-installed"
    if not done.is_file():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", LITELLM], check=True)
        done.write_text(LITELLM + "\n")
    return venv / "bin" / "litellm"


def node_models(client: Client) -> tuple[list[str], str | None]:
    """(the model ids a node lists, why it is not ready or None)."""
    ids = [m["id"] for m in client.get("/v1/models", timeout=10)["data"]]
    try:
        client.get("/ready", timeout=10)
        return ids, None
    except ServerSaidNo as exc:
        return ids, str(exc)


def litellm_config(nodes: dict[str, list[str]], api_key_env: str | None,
                   retries: int, cooldown_secs: int) -> dict:
    """LiteLLM's config: one ``model_name`` per model id, one deployment per node serving
    it (``nodes``: base URL -> ids, in the order given)."""
    model_list = []
    for url, ids in nodes.items():
        for model_id in ids:
            model_list.append({
                "model_name": model_id,
                "litellm_params": {
                    "model": f"openai/{model_id}", "api_base": f"{url}/v1",
                    "api_key": f"os.environ/{api_key_env}" if api_key_env else "unused"},
                "model_info": {"id": f"{model_id}@{url}"}})
    model_list.sort(key=lambda d: d["model_name"])        # stable: grouped by model id
    return {"model_list": model_list,
            "router_settings": {"routing_strategy": "simple-shuffle",
                                "num_retries": retries, "allowed_fails": 0,
                                "cooldown_time": cooldown_secs, "retry_after": 0},
            "litellm_settings": {"drop_params": False},
            # The proxy's own key (it refuses to start without one): clients send it.
            "general_settings": {"master_key": "os.environ/LITELLM_MASTER_KEY"}}


def to_yaml(value, indent: int = 0) -> str:
    """The config as YAML (block style; scalars as JSON, which YAML reads as they are)."""
    pad = " " * indent
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{pad}{key}:\n{to_yaml(item, indent + 2)}")
            else:
                lines.append(f"{pad}{key}: {json.dumps(item)}")
        return "\n".join(lines)
    if isinstance(value, list):
        out = []
        for item in value:
            text = to_yaml(item, indent + 2) if isinstance(item, (dict, list)) \
                else pad + "  " + json.dumps(item)
            out.append(f"{pad}- {text.lstrip()}")
        return "\n".join(out)
    return pad + json.dumps(value)


@click.command("fleet-config")
@click.option("--node", "nodes", multiple=True, metavar="URL",
              help="Base URL of a Hypnos node (repeat for each node).")
@click.option("--api-key", envvar="HYPNOS_API_KEY", metavar="KEY",
              help="API key for reading the nodes' model lists (HYPNOS_API_KEY).")
@click.option("--api-key-env", metavar="NAME", default=None,
              help="Environment variable the proxy reads the nodes' API key from (default: "
                   "the nodes need none).")
@click.option("--retries", type=click.IntRange(0), default=2, show_default=True,
              help="Times the proxy retries a failed request on another node.")
@click.option("--cooldown", "cooldown_secs", type=click.IntRange(1), default=30,
              show_default=True, help="Seconds a node that failed is left out.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Write the config here (default: stdout).")
@click.option("--install-proxy", "install_only", is_flag=True,
              help="Install LiteLLM's proxy in its own cached venv, print its command, exit.")
@json_option
def fleet_config(nodes: tuple[str, ...], api_key: str | None, api_key_env: str | None,
                 retries: int, cooldown_secs: int, output: Path | None, install_only: bool,
                 as_json: bool) -> None:
    """Write a LiteLLM proxy config routing each model id to the nodes that serve it
    (run it with: litellm --config FILE)."""
    if install_only:
        click.echo(str(install_proxy()))
        return
    if not nodes:
        raise click.UsageError("name at least one --node URL")
    found: dict[str, list[str]] = {}
    for url in nodes:
        url = url.rstrip("/")
        try:
            ids, not_ready = node_models(Client(url, api_key))
        except Unreachable as exc:
            raise click.ClickException(f"{url}: {exc.message}") from None
        if not_ready:
            click.echo(f"hypnos: {url} is not ready yet ({not_ready}); its models are "
                       "listed anyway", err=True)
        found[url] = ids
    config = litellm_config(found, api_key_env, retries, cooldown_secs)
    if as_json:
        print_json(config)
        return
    text = ("# Written by hypnos fleet-config from each node's /v1/models.\n"
            "# Run: LITELLM_MASTER_KEY=sk-... litellm --config <this file>\n"
            "# (clients then send that key; LITELLM_LOCAL_MODEL_COST_MAP=True keeps it offline)\n"
            + to_yaml(config) + "\n")
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text)
