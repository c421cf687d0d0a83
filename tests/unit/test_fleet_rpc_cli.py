"""Pure parts of ``hypnos fleet-config`` (the LiteLLM config) and ``hypnos rpc-worker`` (which
addresses it binds), and the RPC workers' figures in /v1/memory/status."""
from __future__ import annotations

import pytest
import yaml

from hypnos.cli.fleet_cmd import litellm_config, to_yaml
from hypnos.cli.rpc_cmd import bind_problem
from hypnos.engines.llama.rpc_probe import WorkerReport
from hypnos.planner.types import MIB, ModelShape, Placement, RemoteShare, Tier
from hypnos.service.config.schema import ModelConfig, RpcWorkerConfig
from hypnos.service.scheduling.pool import ModelState
from hypnos.service.scheduling.rpc_workers import WORKER_RESERVE_BYTES, RpcWorkers


def test_one_route_per_model_id_and_one_deployment_per_node_serving_it():
    cfg = litellm_config({"http://a:9999": ["chat", "minilm"], "http://b:9999": ["chat"]},
                         api_key_env="HYPNOS_KEY", retries=2, cooldown_secs=30)
    routes = [(d["model_name"], d["litellm_params"]["api_base"]) for d in cfg["model_list"]]
    assert routes == [("chat", "http://a:9999/v1"), ("chat", "http://b:9999/v1"),
                      ("minilm", "http://a:9999/v1")]
    first = cfg["model_list"][0]
    assert first["litellm_params"]["model"] == "openai/chat"
    assert first["litellm_params"]["api_key"] == "os.environ/HYPNOS_KEY"
    assert first["model_info"]["id"] == "chat@http://a:9999"
    assert cfg["router_settings"] == {"routing_strategy": "simple-shuffle", "num_retries": 2,
                                      "allowed_fails": 0, "cooldown_time": 30,
                                      "retry_after": 0}
    assert cfg["general_settings"]["master_key"] == "os.environ/LITELLM_MASTER_KEY"


def test_the_yaml_reads_back_as_the_config():
    cfg = litellm_config({"http://a:1": ["qwen3:8b", "x"], "http://b:2": ["qwen3:8b"]},
                         api_key_env=None, retries=1, cooldown_secs=5)
    assert yaml.safe_load(to_yaml(cfg)) == cfg


@pytest.mark.parametrize("host,allowed", [("127.0.0.1", True), ("10.0.0.5", True),
                                          ("192.168.1.2", True), ("::1", True),
                                          ("0.0.0.0", False), ("8.8.8.8", False),
                                          ("worker.lan", False)])
def test_rpc_worker_binds_loopback_or_private_addresses_only(host, allowed):
    assert (bind_problem(host, allow_public=False) is None) is allowed
    assert bind_problem(host, allow_public=True) is None


def _model(model_id, placement, engine=None) -> ModelState:
    """A split chat model resident in tier 1 with ``placement``."""
    cfg = ModelConfig(id=model_id, modality="text_generation", engine="ggml_llama",
                      weights_path=f"{model_id}.gguf")
    return ModelState(cfg=cfg, paths={}, shape=ModelShape(weights_bytes=MIB), tier=Tier.GPU,
                      placement=placement, engine=engine)


def test_worker_budgets_bookings_and_health():
    workers = RpcWorkers([RpcWorkerConfig("127.0.0.1:1", memory_bytes=300 * MIB),
                          RpcWorkerConfig("127.0.0.1:2"),
                          RpcWorkerConfig("127.0.0.1:3")])
    reports = {"127.0.0.1:1": WorkerReport(True, 1000 * MIB, 2000 * MIB, 1, "7.0.0"),
               "127.0.0.1:2": WorkerReport(True, 1000 * MIB, 2000 * MIB, 1, "7.0.0"),
               "127.0.0.1:3": WorkerReport(False, error="[Errno 111] Connection refused")}
    for endpoint, report in reports.items():
        workers.workers[endpoint].report = report
    # Configured memory when set (at most what the worker reports free), else free - reserve.
    assert [(b.endpoint, b.free_bytes) for b in workers.budgets([])] == [
        ("127.0.0.1:1", 300 * MIB), ("127.0.0.1:2", 1000 * MIB - WORKER_RESERVE_BYTES)]
    assert workers.down() == {"127.0.0.1:3": "[Errno 111] Connection refused"}
    share = RemoteShare("127.0.0.1:1", 10, 10, 100 * MIB, output=True)
    chat = _model("chat", Placement(Tier.GPU, gpu_layers=10, remote=(share,)))
    # A worker a resident model holds serves it alone (rpc-server takes one client).
    assert [b.endpoint for b in workers.budgets([chat])] == ["127.0.0.1:2"]
    status = {w["endpoint"]: w for w in workers.status([chat])}
    held = status["127.0.0.1:1"]
    assert held["model"] == "chat" and held["layers"] == 10 and held["answers"] is True
    assert held["booked_bytes"] == 100 * MIB and held["free_bytes"] == 200 * MIB
    assert held["checked"] == "engine"
    assert status["127.0.0.1:3"]["answers"] is False and status["127.0.0.1:3"]["budget_bytes"] == 0


def test_a_lost_engine_shows_its_worker_not_answering():
    class Lost:                 # a split engine (SplitsLayers) that lost a worker
        lost = "RPC worker 127.0.0.1:1 stopped answering (refused)"
        split_layers: dict[str, int] = {}

        def child_rss(self) -> int:
            return 0
    workers = RpcWorkers([RpcWorkerConfig("127.0.0.1:1", memory_bytes=300 * MIB)])
    workers.workers["127.0.0.1:1"].report = WorkerReport(True, 1000 * MIB, 2000 * MIB, 1, "7")
    share = RemoteShare("127.0.0.1:1", 0, 30, 100 * MIB, output=True)
    (entry,) = workers.status([_model("chat", Placement(Tier.GPU, remote=(share,)), Lost())])
    assert entry["answers"] is False and "stopped answering" in entry["error"]
