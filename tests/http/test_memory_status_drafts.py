"""/v1/memory/status shows a target's speculative draft (issue 30): its id, tier, weights and
KV, planned with the target's placement, on a real app over tiny llama GGUFs of one
vocabulary (SmolLM2's). Nothing is loaded here (tests/engines/test_shared_draft.py promotes
two targets of one draft and checks the shared booking)."""
import tomllib

import pytest
from sanic import Sanic

from conftest import require_smollm2
from tiny_llama import write_tiny_llama

from hypnos.catalog.catalog import load_catalog
from hypnos.engines.gguf_meta import read_gguf_meta
from hypnos.planner.types import GIB, Accelerator, Hardware, Topology
from hypnos.service.app import create_app
from hypnos.service.config.load import parse_config

Sanic.test_mode = True
pytestmark = pytest.mark.anyio
CPU = Hardware(Accelerator.CPU, Topology.CPU_ONLY, 0, 16 * GIB)


def drafted_config(root):
    """Two targets (2 slots x 256 tokens, and 1 x 512) drafting with one draft model."""
    source = require_smollm2()
    for name, seed in (("draft", 1), ("one", 2), ("two", 3)):
        write_tiny_llama(root / f"{name}.gguf", source, seed=seed)
    block = ('[[models]]\nid = "{id}"\nmodality = "text_generation"\nengine = "ggml_llama"\n'
             'weights_path = "{id}.gguf"\ncontext_len = 512\nslots = {slots}\n')
    text = (f'models_dir = "{root}"\n' + block.format(id="draft", slots=1)
            + block.format(id="one", slots=2) + 'speculative = {draft = "draft"}\n'
            + block.format(id="two", slots=1) + 'speculative = {draft = "draft", n_max = 3}\n')
    return parse_config(tomllib.loads(text))


async def test_each_target_lists_its_draft_with_the_planned_weights_and_kv(tmp_path):
    app = create_app(drafted_config(tmp_path), catalog=load_catalog(), stage=False,
                     hardware=CPU, builds={})
    _req, resp = await app.asgi_client.get("/v1/memory/status")
    assert resp.status == 200
    rows = {m["id"]: m for m in resp.json["models"]}
    assert "draft" not in rows["draft"]                     # the draft itself drafts nothing
    meta = read_gguf_meta(tmp_path / "draft.gguf")
    for target in ("one", "two"):
        row = rows[target]
        draft, placement = row["draft"], row["placement"]
        assert draft["id"] == "draft" and draft["kind"] == "draft"
        assert draft["tier"] == row["current_tier"] == "tier3_nvme_ssd"
        assert draft["weights_bytes"] == meta.tensor_bytes
        assert not draft["in_target_file"]
        # Not resident: nothing booked, nobody sharing; the plan counts weights and KV.
        assert (draft["weights_booked_bytes"], draft["kv_bytes"]) == (0, 0)
        assert draft["shared_with"] == []
        assert placement["allocated_context_len"] == 512
        assert placement["draft_weight_bytes"] == meta.tensor_bytes
        assert placement["draft_kv_bytes"] == meta.kv_bytes_per_token * 512
    # The draft is not folded into the target's weights any more.
    assert rows["one"]["total_weight_bytes"] == read_gguf_meta(tmp_path / "one.gguf").tensor_bytes
    assert resp.json["tier1_vram_used_bytes"] == 0
