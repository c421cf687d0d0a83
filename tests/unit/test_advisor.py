"""The advisor: lineup search and scoring on small synthetic catalogs (hand-checked), and the
POST /v1/advisor body and config on the real catalog.

Footprints of the synthetic models (shape_from_arch + place, at the default 8192 context):
  big:20b   12 GiB weights, 40 layers, KV 2x40x8x128x2 = 160 KiB/token -> 1.25 GiB,
            workspace 32 MiB + 2048 x (32000 + 12 x 5120) = 0.21 GiB  -> 13.46 GiB
  mid:12b    7 GiB, same architecture                                 ->  8.46 GiB
  small:3b   2 GiB, 28 layers x d 3072                                ->  3.04 GiB
  emb:4b     4 GiB, placed whole: + 64 MiB                            ->  4.06 GiB
  moe:30b   18 GiB, 48 layers, expert_fraction 0.9                    -> 18.89 GiB
  whisper / tts run on the CPU (faster_whisper / onnx_runtime): tier 2, never tier 1.
Tier 1 on a discrete GPU = VRAM - 0.5 GiB.
"""
from __future__ import annotations

import tomllib

import pytest

from hypnos.advisor import AdvisorError, NoLineupFits, advise
from hypnos.advisor.candidates import Machine
from hypnos.advisor.search import search
from hypnos.catalog.catalog import load_catalog, parse_catalog
from hypnos.planner import GIB, derive_budgets, hardware_for
from hypnos.service.config.load import parse_config

SPEC_MODEL_FIELDS = {
    "id", "name", "quant", "serves", "weights_bytes", "resident_bytes", "runs_on_cpu",
    "gpu_layers", "num_layers", "cpu_expert_layers", "context_len", "slots", "initial_tier",
    "priority", "keep_warm_in_ram", "moe_offload", "load_secs_cold", "load_secs_warm"}
SPEC_BODY_FIELDS = {"machine", "budgets", "models", "interactive_coresident",
                    "interactive_bytes", "warnings", "specs", "config"}


def _arch(layers, d, kv, hd, ctx=32768, ef=0.0):
    return {"num_layers": layers, "embedding_length": d, "head_count_kv": kv, "head_dim": hd,
            "context_length": ctx, "expert_fraction": ef}


def _entry(model_id, modality, engine, params_b, size, *, quant="Q4_K_M", arch=None, also=(),
           defaults=None):
    return {"id": model_id, "name": model_id.upper(), "publisher": "test", "license": "mit",
            "modality": modality, "engine": engine, "params_b": params_b,
            "additional_modalities": list(also), "defaults": defaults or {},
            "arch": arch or {},
            "variants": [{"quant": quant, "default": True, "files": [
                {"role": "weights", "local": f"{model_id}/{quant}.bin", "size": size,
                 "pypi": {"package": "x", "version": "1", "path": "x"}}]}]}


BIG = _entry("big:20b", "text_generation", "ggml_llama", 20, 12 * GIB, arch=_arch(40, 5120, 8, 128))
MID = _entry("mid:12b", "text_generation", "ggml_llama", 12, 7 * GIB, arch=_arch(40, 5120, 8, 128))
SMALL = _entry("small:3b", "text_generation", "ggml_llama", 3, 2 * GIB,
               arch=_arch(28, 3072, 8, 128))
EMB = _entry("emb:4b", "embeddings", "ggml_llama", 4, 4 * GIB)
MOE = _entry("moe:30b", "text_generation", "ggml_llama", 30, 18 * GIB,
             arch=_arch(48, 2048, 4, 128, ef=0.9))
WHISPER = _entry("whisper:1.5b", "speech_to_text", "faster_whisper", 1.5, 3 * GIB, quant="int8")
TTS = _entry("tts:80m", "text_to_speech", "onnx_runtime", 0.08, 300 * 1024**2, quant="int8")


def _cat(*entries):
    return parse_catalog({"catalog_version": 1, "entry": list(entries)})


def _machine(vram_gib, ram_gib, unified=False) -> Machine:
    hw = hardware_for(vram_gib * GIB, ram_gib * GIB, unified)
    return Machine(hw, derive_budgets(hw))


def _ids(lineup):
    return [m.cand.entry.id for m in lineup.models]


def _advise(catalog, needs, vram_gib, ram_gib, unified=False):
    return advise(catalog, needs, vram_bytes=vram_gib * GIB if vram_gib is not None else None,
                  ram_bytes=ram_gib * GIB, unified_memory=unified)


# ----------------------------------------------------------------- scoring, hand-checked

def test_largest_chat_model_that_fits_wins():
    # 24G: big fits whole (13.46 <= 23.5): 20 + co-residency bonus 20 = 40 > small's 3 + 3
    lineup = search(_cat(BIG, SMALL), ["chat"], _machine(24, 64))
    assert _ids(lineup) == ["big:20b"]
    assert lineup.score == pytest.approx(40.0)


def test_partial_placement_is_penalised():
    # 8G (tier 1 7.5): big splits layers -> 20 x 0.25 = 5, no bonus; small fits: 3 + 3 = 6
    lineup = search(_cat(BIG, SMALL), ["chat"], _machine(8, 64))
    assert _ids(lineup) == ["small:3b"]
    assert lineup.score == pytest.approx(6.0)


def test_coresident_interactive_models_beat_a_bigger_chat_model():
    # 16G (15.5): big + emb = 13.46 + 4.06 = 17.5 > 15.5 -> 20 + 4 = 24, no bonus;
    # mid + emb = 8.46 + 4.06 = 12.5 fit together -> (12 + 4) x 2 = 32
    lineup = search(_cat(BIG, MID, EMB), ["chat", "embeddings"], _machine(16, 64))
    assert _ids(lineup) == ["mid:12b", "emb:4b"]
    assert lineup.coresident and lineup.score == pytest.approx(32.0)
    # 24G (23.5): big + emb fit together -> (20 + 4) x 2 = 48
    lineup = search(_cat(BIG, MID, EMB), ["chat", "embeddings"], _machine(24, 64))
    assert _ids(lineup) == ["big:20b", "emb:4b"]
    assert lineup.score == pytest.approx(48.0)


def test_one_slot_and_8k_context_when_that_makes_them_fit():
    # big with 4 slots x 32768 context: KV 160 KiB x 32768 = 5 GiB -> 17.2 GiB; with emb 21.3 >
    # 19.5 (20G). One slot at 8192: 13.46 + 4.06 = 17.5 <= 19.5 -> co-resident, score 48.
    big = {**BIG, "defaults": {"slots": 4, "context_len": 32768}}
    body = _advise(_cat(big, EMB), ["chat", "embeddings"], 20, 64)
    chat = body["models"][0]
    assert (chat["id"], chat["slots"], chat["context_len"]) == ("big:20b", 1, 8192)
    assert body["interactive_coresident"] is True
    assert any("1 slot" in w for w in body["warnings"])
    # on 24G (23.5) the defaults fit together: kept
    chat = _advise(_cat(big, EMB), ["chat", "embeddings"], 24, 64)["models"][0]
    assert (chat["slots"], chat["context_len"]) == (4, 32768)


def test_moe_auto_offload_on_a_discrete_gpu():
    # 16G: moe whole 18.89 > 15.5; "auto" sheds 3.39 GiB = ceil(3.39 / 0.336) = 11 layers'
    # experts, all 48 layers stay on the GPU: 30 x 0.75 = 22.5, x 2 co-resident = 45;
    # mid fits: 12 x 2 = 24; moe with "off" splits layers: 30 x 0.25 = 7.5
    body = _advise(_cat(MOE, MID), ["chat"], 16, 64)
    chat = body["models"][0]
    assert chat["id"] == "moe:30b" and chat["moe_offload"] == "auto"
    assert (chat["gpu_layers"], chat["num_layers"], chat["cpu_expert_layers"]) == (48, 48, 11)
    assert 'moe_offload = "auto"' in body["config"]
    assert any("experts of 11 of 48" in w for w in body["warnings"])


def test_unified_memory_budgets_and_no_auto_offload():
    # unified 24G: tier 1 = min(16, 20) = 16 GiB; "auto" is ignored there, so moe splits
    # (30 x 0.25 = 7.5) and mid (8.46 GiB, 12 x 2 = 24) wins
    body = _advise(_cat(MOE, MID), ["chat"], None, 24, unified=True)
    assert body["budgets"] == {"tier1_bytes": 16 * GIB, "tier2_bytes": 4 * GIB,
                               "unified_memory": True}
    assert [m["id"] for m in body["models"]] == ["mid:12b"]
    assert all(m["moe_offload"] == "off" for m in body["models"])


def test_need_weights_for_transcription_and_speech():
    # voice = transcription + chat + speech: 12 + 1.5 x 0.25 + 0.08 x 0.1 = 12.383, plus the
    # interactive part again (chat 12 + speech 0.008) = 24.391
    lineup = search(_cat(MID, WHISPER, TTS), ["voice"], _machine(24, 64))
    assert _ids(lineup) == ["mid:12b", "whisper:1.5b", "tts:80m"]
    assert lineup.score == pytest.approx(24.391)


def test_a_model_serving_two_needs_is_listed_once():
    omni = _entry("omni:8b", "text_generation", "ggml_llama", 8, 5 * GIB,
                  arch=_arch(32, 4096, 8, 128), also=("vision",))
    body = _advise(_cat(omni), ["chat", "vision"], 24, 64)
    assert [(m["id"], m["serves"]) for m in body["models"]] == [("omni:8b", ["chat", "vision"])]
    assert body["specs"] == ["omni:8b:Q4_K_M"]


def test_whisper_and_onnx_run_on_an_nvidia_gpu():
    # Issue 17: on an NVIDIA GPU faster-whisper (CTranslate2) and onnxruntime-gpu (Kokoro,
    # the embedders) compute on the GPU, so they take tier 1 there, not the CPU.
    body = _advise(_cat(MID, WHISPER, TTS), ["voice"], 24, 64)
    by_id = {m["id"]: m for m in body["models"]}
    assert by_id["mid:12b"]["serves"] == ["voice"] and not by_id["mid:12b"]["runs_on_cpu"]
    assert not by_id["whisper:1.5b"]["runs_on_cpu"] and not by_id["tts:80m"]["runs_on_cpu"]
    gpu = sum(m["resident_bytes"] for m in body["models"])
    assert body["budgets"]["tier1_bytes"] >= gpu > 3 * GIB     # whisper's 3 GiB among them
    # interactive: mid (chat) + tts (speech), not whisper
    assert body["interactive_bytes"] == (by_id["mid:12b"]["resident_bytes"]
                                         + by_id["tts:80m"]["resident_bytes"])


def test_engines_without_a_gpu_build_take_no_tier1_and_serve_voice():
    # Apple Silicon: CTranslate2 and onnxruntime (no CoreML here) run on the CPU; GLiNER
    # and docling run on the CPU everywhere.
    body = _advise(_cat(MID, WHISPER, TTS), ["voice"], 0, 64, unified=True)
    by_id = {m["id"]: m for m in body["models"]}
    assert not by_id["mid:12b"]["runs_on_cpu"]
    assert by_id["whisper:1.5b"]["runs_on_cpu"] and by_id["whisper:1.5b"]["gpu_layers"] == 0
    assert by_id["tts:80m"]["runs_on_cpu"]
    ner = _entry("ner:1b", "entity_extraction", "gliner", 1, GIB, quant="fp32")
    body = _advise(_cat(MID, ner), ["chat", "entities"], 24, 64)
    assert {m["id"]: m["runs_on_cpu"] for m in body["models"]} == {"mid:12b": False,
                                                                  "ner:1b": True}


def test_cpu_only_machine_runs_everything_on_the_cpu():
    body = _advise(_cat(MID, SMALL), ["chat"], 0, 32)       # tier 1 = 16 GiB of process memory
    assert body["budgets"]["tier1_bytes"] == 16 * GIB
    chat = body["models"][0]
    assert chat["id"] == "mid:12b" and chat["runs_on_cpu"] and chat["gpu_layers"] == 0


def test_warm_memory_too_small_drops_the_fewest_models():
    # tier 2 = 8 / 2 = 4 GiB < 7 + 3 GiB of weights (6 too many): whisper (not interactive)
    # is dropped first (3 left), then mid (-4: room); whisper then fits back (-4 + 3 <= 0)
    body = _advise(_cat(MID, WHISPER), ["chat", "transcription"], 24, 8)
    by_id = {m["id"]: m for m in body["models"]}
    assert by_id["whisper:1.5b"]["keep_warm_in_ram"] is True
    assert by_id["whisper:1.5b"]["initial_tier"] == "tier2_pinned_ram"
    assert by_id["mid:12b"]["keep_warm_in_ram"] is False
    assert by_id["mid:12b"]["initial_tier"] == "tier1_gpu_vram"
    assert any("not kept warm in RAM: mid:12b (" in w for w in body["warnings"])
    # 4 GiB of RAM (tier 2: 2 GiB), 7 + 1.5 + 1.5 GiB: drop ner (low priority: 8.5 - 1.5 =
    # 6.5 left), stt (5), mid (-2); stt fits back (-0.5), ner does not (+1): ner on disk
    stt = _entry("stt:1b", "speech_to_text", "faster_whisper", 1, 3 * GIB // 2, quant="int8")
    ner = _entry("ner:1b", "entity_extraction", "gliner", 1, 3 * GIB // 2, quant="fp32")
    body = _advise(_cat(MID, stt, ner), ["chat", "transcription", "entities"], 24, 4)
    by_id = {m["id"]: m for m in body["models"]}
    assert by_id["ner:1b"]["initial_tier"] == "tier3_nvme_ssd"
    assert (by_id["ner:1b"]["keep_warm_in_ram"], by_id["stt:1b"]["keep_warm_in_ram"],
            by_id["mid:12b"]["keep_warm_in_ram"]) == (False, True, False)


# ----------------------------------------------------------------- errors

def test_unknown_need_is_an_advisor_error_naming_it():
    with pytest.raises(AdvisorError, match="'telepathy'") as exc:
        _advise(_cat(MID), ["chat", "telepathy"], 24, 64)
    assert not isinstance(exc.value, NoLineupFits)


def test_need_nobody_serves():
    with pytest.raises(NoLineupFits, match="'images'"):
        _advise(_cat(MID), ["chat", "images"], 24, 64)


def test_smallest_model_does_not_fit_alone():
    # 1G VRAM: tier 1 0.5 GiB; small's fixed part (non-layer 0.12 + KV 2x28x8x128x2 x 8192
    # = 0.875 + workspace 0.16 GiB) does not fit, nor does any layer split
    with pytest.raises(NoLineupFits) as exc:
        _advise(_cat(BIG, SMALL), ["chat"], 1, 64)
    msg = str(exc.value)
    assert "'chat'" in msg and "small:3b:Q4_K_M" in msg and "GiB short" in msg


def test_voice_names_the_need_that_does_not_fit():
    with pytest.raises(NoLineupFits, match=r"'voice \(transcription\)'"):
        _advise(_cat(MID, TTS), ["voice"], 24, 64)


# ----------------------------------------------------------------- the real catalog

@pytest.mark.parametrize("machine", [(24, 64, False), (None, 32, True), (0, 16, False)])
def test_real_catalog_body_and_config(machine):
    vram, ram, unified = machine
    needs = ["chat", "voice", "documents", "embeddings"]
    body = _advise(load_catalog(), needs, vram, ram, unified)
    assert set(body) == SPEC_BODY_FIELDS
    for m in body["models"]:
        assert set(m) == SPEC_MODEL_FIELDS
    served = {n for m in body["models"] for n in m["serves"]}
    assert served == set(needs)
    assert body["specs"] == [f"{m['id']}:{m['quant']}" for m in body["models"]]
    hw = hardware_for(vram * GIB if vram else None, ram * GIB, unified)
    b = derive_budgets(hw)
    assert body["budgets"]["tier1_bytes"] == b.tier1_bytes
    cfg = parse_config(tomllib.loads(body["config"]))
    assert [c.id for c in cfg.models] == [m["id"] for m in body["models"]]
    for c, m in zip(cfg.models, body["models"], strict=True):
        assert str(c.initial_tier) == m["initial_tier"] and str(c.priority) == m["priority"]
        if m["num_layers"]:
            assert (c.slots, c.context_len) == (m["slots"], m["context_len"])
    assert body["config"].startswith("# Generated by the Hypnos advisor")


def test_spec_example_machine_echo_and_budgets():
    body = _advise(load_catalog(), ["chat"], 24, 64)
    assert body["machine"] == {"vram_bytes": 25769803776, "ram_bytes": 68719476736,
                               "unified_memory": False}
    assert body["budgets"] == {"tier1_bytes": 25232932864, "tier2_bytes": 34359738368,
                               "unified_memory": False}


def test_bounded_search_keeps_the_mid_sized_models_that_fit():
    # 12 chat models (1B..34B, three quants each) and four of every other kind: the largest
    # chat models only split on 24G; pruning by parameters alone once kept only those. The
    # pick must be a chat model wholly on the GPU, resident with the other interactive ones.
    entries = []
    for i in range(12):
        e = _entry(f"chat{i}", "text_generation", "ggml_llama", 1 + 3 * i, (1 + 2 * i) * GIB,
                   arch=_arch(32 + i, 2048 + 256 * i, 8, 128), also=("vision",) if i % 2 else ())
        e["variants"] = [{**e["variants"][0], "quant": q, "default": j == 0, "files": [
            {**e["variants"][0]["files"][0], "size": int((1 + 2 * i) * GIB * f)}]}
            for j, (q, f) in enumerate([("Q4_K_M", 1), ("Q8_0", 1.8), ("Q6_K", 1.4)])]
        entries.append(e)
    for modality, engine in [("speech_to_text", "faster_whisper"),
                             ("text_to_speech", "onnx_runtime"), ("embeddings", "ggml_llama"),
                             ("image_generation", "ggml_diffusion"),
                             ("document_conversion", "docling"), ("entity_extraction", "gliner")]:
        entries += [_entry(f"{modality}{i}", modality, engine, 0.1 * (i + 1), (i + 1) * GIB // 2)
                    for i in range(4)]
    needs = ["chat", "vision", "voice", "embeddings", "images", "documents", "entities"]
    body = _advise(_cat(*entries), needs, 24, 64)
    assert body["interactive_coresident"] is True
    chat = body["models"][0]
    assert "chat" in chat["serves"] and chat["gpu_layers"] == chat["num_layers"]
    assert {n for m in body["models"] for n in m["serves"]} == set(needs)


# ----------------------------------------------------------------- generations (issue 18)

def _dated(entry, model_id, released, params_b=None, **extra):
    return {**entry, "id": model_id, "released": released,
            "params_b": params_b if params_b is not None else entry["params_b"], **extra,
            "variants": [{**entry["variants"][0], "files": [
                {**entry["variants"][0]["files"][0], "local": f"{model_id}/w.bin"}]}]}


def test_newer_generation_wins_when_scores_are_alike():
    # MID (12B) against a newer 11.5B of the same footprint: 23 vs 24 with the bonus, within
    # ALIKE_FRACTION, so the 2026 model wins in either catalog order.
    old = _dated(MID, "old:12b", "2025-04-29")
    new = _dated(MID, "new:11.5b", "2026-04-02", params_b=11.5)
    for order in ((old, new), (new, old)):
        assert _ids(search(_cat(*order), ["chat"], _machine(24, 64))) == ["new:11.5b"]
    # Not alike: a 20B of 2025 beats an 11.5B of 2026 (40 vs 23).
    big_old = _dated(BIG, "big-old:20b", "2025-04-29")
    assert _ids(search(_cat(big_old, new), ["chat"], _machine(24, 64))) == ["big-old:20b"]


def test_among_alike_scores_the_chat_model_that_calls_tools_wins():
    # The newer 11.5B calls no tools; the 12B of a year before does: alike scores, so the one
    # an OpenAI client's tools work with wins, in either catalog order.
    tools = _dated(MID, "tools:12b", "2025-04-29", capabilities=["tools"])
    plain = _dated(MID, "plain:11.5b", "2026-04-02", params_b=11.5, capabilities=[])
    for order in ((tools, plain), (plain, tools)):
        assert _ids(search(_cat(*order), ["chat"], _machine(24, 64))) == ["tools:12b"]
    # With both calling tools the newer generation decides again.
    newer = {**plain, "capabilities": ["tools"]}
    assert _ids(search(_cat(tools, newer), ["chat"], _machine(24, 64))) == ["plain:11.5b"]


def test_an_entry_needing_a_newer_engine_is_never_picked():
    ahead = _dated(BIG, "ahead:20b", "2026-10", requires_llama_cpp="b99999")
    assert _ids(search(_cat(ahead, SMALL), ["chat"], _machine(24, 64))) == ["small:3b"]


@pytest.mark.parametrize("vram,ram,unified", [(8, 32, False), (24, 64, False),
                                              (80, 256, False), (None, 32, True)])
def test_real_catalog_picks_current_models(vram, ram, unified):
    """The chat pick for 8 / 24 / 80 GB GPUs and a 32 GB Mac is a model released in 2025-07
    or later (the catalog's older generation is Qwen3 / Gemma 3 of early 2025)."""
    cat = load_catalog()
    body = _advise(cat, ["chat", "voice"], vram, ram, unified)
    chat = next(m for m in body["models"] if "chat" in m["serves"])
    assert cat.get(chat["id"]).released >= "2025-07", chat["id"]


# ----------------------------------------------------------------- the agents need

def _tools(entry, model_id, *, ctx=32768, **defaults):
    return {**_dated(entry, model_id, "2026-01", capabilities=["tools"]),
            "arch": {**entry["arch"], "context_length": ctx}, "defaults": defaults}


def test_agent_context_holds_a_first_turn_and_its_clamped_answer():
    from hypnos.advisor.candidates import AGENT_CONTEXT, AGENT_MIN_CONTEXT
    assert AGENT_MIN_CONTEXT == 18_800 + 8_192
    assert AGENT_CONTEXT == 32768 and AGENT_CONTEXT >= AGENT_MIN_CONTEXT


def test_agents_give_the_chat_model_an_agent_context():
    # mid's catalog default is 16384 x 1: plain chat keeps it, agents raise it to 32768
    # (KV 160 KiB x 32768 = 5 GiB: 12.2 GiB + emb 4.06 still fit 23.5 together).
    mid = _tools(MID, "mid:12b", context_len=16384, slots=1)
    plain = _advise(_cat(mid, EMB), ["chat", "embeddings"], 24, 64)["models"][0]
    assert (plain["id"], plain["context_len"], plain["slots"]) == ("mid:12b", 16384, 1)
    body = _advise(_cat(mid, EMB), ["chat", "embeddings", "agents"], 24, 64)
    chat = body["models"][0]
    assert chat["id"] == "mid:12b" and chat["context_len"] // chat["slots"] >= 32768
    assert chat["serves"] == ["chat", "agents"]       # one model: the agents' serves chat
    assert [m["id"] for m in body["models"]] == ["mid:12b", "emb:4b"]
    block = tomllib.loads(body["config"])["models"][0]
    assert block["context_len"] // block["slots"] >= 32768


def test_the_reduced_setting_keeps_the_agent_context():
    # big with 4 slots x 32768 and emb do not fit 20G together (as in
    # test_one_slot_and_8k_context_when_that_makes_them_fit); the reduced setting is one slot,
    # and for agents that slot keeps 32768 instead of being cut to 8192.
    big = _tools(BIG, "big:20b", slots=4, context_len=4 * 32768)
    chat = _advise(_cat(big, EMB), ["agents", "embeddings"], 20, 64)["models"][0]
    assert chat["context_len"] // chat["slots"] >= 32768


def test_agents_need_a_tool_calling_model_trained_for_the_turn():
    short = _tools(BIG, "short:20b", ctx=16384)          # bigger, but trained for 16k
    plain = _dated(MID, "plain:12b", "2026-01")          # calls no tools
    ok = _tools(SMALL, "ok:3b")
    assert _ids(search(_cat(short, plain, ok), ["agents"], _machine(24, 64))) == ["ok:3b"]
    with pytest.raises(NoLineupFits, match="agents"):
        search(_cat(short, plain), ["agents"], _machine(24, 64))


def test_voice_with_agents_fills_one_chat_role():
    ok = _tools(MID, "ok:12b")
    lineup = search(_cat(ok, WHISPER, TTS), ["voice", "agents"], _machine(24, 64))
    assert sorted(_ids(lineup)) == ["ok:12b", "tts:80m", "whisper:1.5b"]
    chat = next(m for m in lineup.models if m.cand.entry.id == "ok:12b")
    assert chat.roles == ("agents",)


def test_real_catalog_chat_voice_agents_on_24g():
    """`hypnos advise --needs chat,voice,agents --vram 24G`: the chat model calls tools and
    each slot holds an agent's first turn (today's chat,voice pick is 16384 x 1)."""
    from hypnos.advisor.candidates import AGENT_MIN_CONTEXT
    cat = load_catalog()
    body = _advise(cat, ["chat", "voice", "agents"], 24, 24)
    chat = next(m for m in body["models"] if "agents" in m["serves"])
    assert "chat" in chat["serves"] and "voice" in chat["serves"]
    assert "tools" in cat.get(chat["id"]).capabilities
    assert chat["context_len"] // chat["slots"] >= AGENT_MIN_CONTEXT
