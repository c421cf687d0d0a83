"""The playground in a real browser: Debian's Chromium driven by Playwright (no browser
download), against a real `hypnos serve` on 127.0.0.1 with the real models of the default
lineup (SmolLM2 chat, MiniLM embeddings, whisper tiny.en, Kokoro). Screenshots of every view
go to tests/artifacts/playground/.

An HTML upload converts through docling in the documents view, an audio upload is
transcribed, answered and spoken in the voice view, and the embeddings view is compared against
the API; the entities view (no GLiNER model here) is checked to degrade."""
import base64
import json
import math
import sys
from pathlib import Path

import httpx
import pytest

from conftest import MODELS_DIR, lineup_config, model_block, ROOT, require_smollm2

sys.path.insert(0, str(ROOT / "bench"))
from harness import ServerProcess  # noqa: E402

pytestmark = [pytest.mark.real, pytest.mark.slow]

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "tests" / "artifacts" / "playground"
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               # A synthetic microphone (a beep) that needs no permission prompt.
               "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream"]
CONFIG = lineup_config(
    model_block("smol", "text_generation", context_len=4096, initial_tier="tier1_gpu_vram"),
    model_block("minilm", "embeddings"), model_block("whisper", "speech_to_text"),
    model_block("kokoro", "text_to_speech"),
    '[[models]]\nid = "docling"\nmodality = "document_conversion"\nengine = "docling"\n')
SLOW_MS = 240_000     # a cold model load plus inference on a busy 2-core machine


def _serve(tmp: Path, config: str) -> ServerProcess:
    (tmp / "hypnos.toml").write_text(config)
    return ServerProcess(tmp / "hypnos.toml", tmp / "server.log", ready_timeout=120)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require_smollm2()
    srv = _serve(tmp_path_factory.mktemp("playground"), CONFIG)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `./run.sh test` installs it "
                    "(or: apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        yield b
        b.close()


class Page:
    """A fresh tab that records console errors and uncaught exceptions."""

    def __init__(self, browser, base: str):
        self.context = browser.new_context(viewport={"width": 1300, "height": 900})
        self.page = self.context.new_page()
        self.page.set_default_timeout(60_000)
        self.base = base
        self.console_errors: list[str] = []
        self.page_errors: list[str] = []
        self.page.on("console", lambda m: m.type == "error" and self.console_errors.append(m.text))
        self.page.on("pageerror", lambda e: self.page_errors.append(str(e)))

    def open(self, view: str = "tiers"):
        self.page.goto(f"{self.base}/#{view}")
        self.page.wait_for_selector(f"#view-{view}.active")
        return self.page

    def tab(self, view: str):
        self.page.click(f'#tabs button[data-view="{view}"]')
        self.page.wait_for_selector(f"#view-{view}.active")

    def screenshot(self, name: str) -> Path:
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 5000
        return path


def wait_text(page, element_id: str, text: str, timeout: float = 60_000):
    # A function, not a string: the page's CSP forbids eval, which string predicates use.
    page.wait_for_function("([id, text]) => document.getElementById(id).textContent.includes(text)",
                           arg=[element_id, text], timeout=timeout)


@pytest.fixture
def tab(browser, server):
    t = Page(browser, server.base)
    yield t
    t.context.close()
    assert not t.page_errors, t.page_errors


def test_page_loads_with_no_console_errors(tab, server):
    page = tab.open("tiers")
    page.wait_for_selector('.lane[data-tier="tier1_gpu_vram"] .block[data-model="smol"]')
    for tier in ("tier1_gpu_vram", "tier2_pinned_ram", "tier3_nvme_ssd"):
        assert page.locator(f'.lane[data-tier="{tier}"] .bar').count() == 1
    # Everything not staged starts on disk.
    for model in ("minilm", "whisper", "kokoro"):
        chip = f'.lane[data-tier="tier3_nvme_ssd"] .chip[data-model="{model}"]'
        assert page.locator(chip).count() == 1
    rows = page.locator("#tiers-models tbody tr")
    assert rows.count() == 5          # every configured model
    # Live: the status is polled again without reloading the page.
    first = page.inner_text("#tiers-updated")
    page.wait_for_function("(first) => document.getElementById('tiers-updated').textContent "
                           "!== first", arg=first, timeout=10_000)
    tab.screenshot("tiers")
    assert tab.console_errors == []


def test_chat_streams_an_answer(tab):
    page = tab.open("chat")
    assert page.input_value("#chat-model") == "smol"
    # Every state the answer's text goes through while it arrives.
    page.evaluate("""() => {
      window.states = [];
      new MutationObserver(() => {
        const c = document.querySelector('.msg.assistant .content');
        if (c) window.states.push(c.textContent);
      }).observe(document.getElementById('chat-log'),
                 {childList: true, subtree: true, characterData: true});
    }""")
    page.click("#view-chat details summary")
    page.fill("#chat-system", "Answer in one short sentence.")
    page.fill("#chat-temp", "0")
    page.fill("#chat-input", "What is the capital of France?")
    with page.expect_request("**/v1/chat/completions") as req:
        page.click("#chat-send")
    assert req.value.post_data_json["stream"] is True
    page.wait_for_selector(".msg.assistant.done", timeout=SLOW_MS)
    answer = page.inner_text(".msg.assistant .content")
    assert answer.strip()                     # its words depend on the CPU
    states = [s for s in dict.fromkeys(page.evaluate("window.states")) if s]
    assert len(states) >= 3, states          # it grew piece by piece, not all at once
    assert all(answer.startswith(s) for s in states)
    telemetry = page.inner_text(".msg.assistant .telemetry")
    assert "warm (tier1_gpu_vram)" in telemetry and "decode" in telemetry and "tok/s" in telemetry
    assert page.locator(".msg.assistant .reasoning").is_hidden()    # no thinking asked
    tab.screenshot("chat")
    assert tab.console_errors == []


def test_a_tier_move_shows_up_in_the_visualizer(tab, server):
    page = tab.open("tiers")
    row = '#tiers-models tr[data-model="smol"]'
    page.wait_for_selector('.lane[data-tier="tier1_gpu_vram"] .block[data-model="smol"]')
    page.click(f'{row} button[data-move="tier2_pinned_ram"]')
    page.wait_for_selector('.lane[data-tier="tier2_pinned_ram"] .block[data-model="smol"]',
                           timeout=SLOW_MS)
    assert page.locator('.lane[data-tier="tier1_gpu_vram"] .block[data-model="smol"]').count() == 0
    assert page.inner_text(f'{row} td[data-col="tier"]') == "T2"
    smol = next(m for m in server.status()["models"] if m["id"] == "smol")
    assert smol["current_tier"] == "tier2_pinned_ram"
    assert "smol moved to Tier 2" in page.inner_text("#tiers-message")
    tab.screenshot("tiers-after-move")
    # And back up: a promotion from the page.
    page.click(f'{row} button[data-move="tier1_gpu_vram"]')
    page.wait_for_selector('.lane[data-tier="tier1_gpu_vram"] .block[data-model="smol"]',
                           timeout=SLOW_MS)
    smol = next(m for m in server.status()["models"] if m["id"] == "smol")
    assert smol["current_tier"] == "tier1_gpu_vram"
    assert tab.console_errors == []


def test_embeddings_similarity_matches_the_api(tab, server):
    page = tab.open("embeddings")
    page.fill("#emb-a", "A cat sits on the mat.")
    page.fill("#emb-b", "A kitten is resting on a rug.")
    page.click('#emb-form button[type="submit"]')
    shown = page.wait_for_selector("#emb-similarity", timeout=SLOW_MS)
    shown = float(shown.get_attribute("data-value"))
    body = server.post("/v1/embeddings", {"model": "minilm", "input": [
        "A cat sits on the mat.", "A kitten is resting on a rug."]}).json()
    a, b = (d["embedding"] for d in body["data"])
    expected = sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(
        sum(x * x for x in a) * sum(y * y for y in b))
    assert shown == pytest.approx(expected, abs=1e-5)
    assert 0.3 < shown < 1.0
    tab.screenshot("embeddings")


def test_voice_turn_from_an_uploaded_recording(tab, server):
    question = server.post("/v1/audio/speech", {"model": "kokoro", "voice": "alloy",
                                                "input": "What is the capital of France?"})
    assert question.status_code == 200
    page = tab.open("voice")
    assert page.input_value("#voice-stt") == "whisper"
    assert page.input_value("#voice-tts") == "kokoro"
    sent = []
    page.on("request", lambda r: "/v1/" in r.url and r.method == "POST" and sent.append(r))
    page.set_input_files("#voice-file", files=[{"name": "question.wav", "mimeType": "audio/wav",
                                                "buffer": question.content}])
    audio = page.wait_for_selector(".turn audio", timeout=SLOW_MS)
    assert float(audio.get_attribute("data-seconds")) > 0.3
    heard = page.inner_text(".turn [data-stage=heard] .text").lower()
    assert "capital" in heard and "france" in heard
    assert page.inner_text(".turn [data-stage=answer] .text").strip()
    routes = [r.url.split("/v1/")[1] for r in sent]
    assert routes == ["audio/transcriptions", "chat/completions", "audio/speech"]
    flows = {r.headers["x-hypnos-workflow"] for r in sent}
    assert len(flows) == 1 and flows.pop().startswith("voice_turn/")
    assert [r.headers.get("x-hypnos-next-model") for r in sent] == ["smol", "kokoro", None]
    assert sent[2].headers["x-hypnos-workflow-end"] == "true"
    assert sent[2].post_data_json["stream"] is True
    assert server.status()["latency"]["workflows"]["voice_turn"]["count"] >= 1
    tab.screenshot("voice")
    assert tab.console_errors == []


def test_voice_recording_reaches_transcription_as_wav(tab):
    page = tab.open("voice")
    page.click("#voice-record")
    page.wait_for_function("() => document.getElementById('voice-record').textContent === 'Stop'")
    page.wait_for_timeout(1500)
    with page.expect_response("**/v1/audio/transcriptions", timeout=SLOW_MS) as resp:
        page.click("#voice-record")
    assert resp.value.status == 200
    # The recording was decoded and sent as WAV (the page names it recording.webm otherwise).
    assert page.inner_text(".turn .source").startswith("recording.wav")
    # The synthetic microphone plays a beep: whatever whisper makes of it, the turn goes on
    # or stops with a message, never with an uncaught error (checked by the fixture).
    page.wait_for_function("() => ['done', 'nothing was heard', 'no answer'].some("
                           "s => document.getElementById('voice-state').textContent.includes(s))",
                           timeout=SLOW_MS)


def test_realtime_push_to_talk_hears_answers_and_speaks(tab, server):
    """Issue 42: the voice view's push-to-talk holds the synthetic microphone (a beep) open,
    sends it over GET /v1/realtime on release, and plays the streamed answer."""
    page = tab.open("voice")
    page.wait_for_selector('#voice-chat option[value="smol"]', state="attached")
    frames = []
    page.on("websocket", lambda ws: "/v1/realtime" in ws.url and ws.on(
        "framesent", lambda f: frames.append(f)))
    page.dispatch_event("#rt-talk", "pointerdown")
    page.wait_for_function("() => document.getElementById('rt-talk').textContent"
                           ".startsWith('Release')", timeout=SLOW_MS)
    page.wait_for_timeout(1500)
    page.dispatch_event("#rt-talk", "pointerup")
    done = page.wait_for_selector(".realtime-turn[data-status]", state="attached",
                                  timeout=SLOW_MS)
    assert done.get_attribute("data-status") in ("completed", "incomplete")
    kinds = [json.loads(f)["type"] for f in frames if isinstance(f, str)]
    assert kinds[0] == "session.update" and kinds.count("input_audio_buffer.append") >= 5
    assert kinds[-2:] == ["input_audio_buffer.commit", "response.create"]
    assert page.inner_text(".realtime-turn [data-stage=answer] .text").strip()
    audio = page.wait_for_selector(".realtime-turn audio", timeout=SLOW_MS)
    assert float(audio.get_attribute("data-seconds")) > 0.3
    tab.screenshot("voice-realtime")
    assert tab.console_errors == []


def test_realtime_talking_over_the_answer_cuts_it_to_what_was_heard(tab, server):
    """Issue 42's barge-in from the page: pressing push-to-talk while the answer's audio
    plays stops it and sends conversation.item.truncate for the answer's message, with the
    milliseconds played (after response.cancel while it is still being made); the server
    confirms the cut. The press comes as the first audio arrives, which plays at least a
    phrase's length, so the answer is always still playing then."""
    page = tab.open("voice")
    page.wait_for_selector('#voice-chat option[value="smol"]', state="attached")
    sockets = []
    page.on("websocket", lambda ws: "/v1/realtime" in ws.url and sockets.append(ws))
    sent, got = [], []
    page.dispatch_event("#rt-talk", "pointerdown")
    page.wait_for_function("() => document.getElementById('rt-talk').textContent"
                           ".startsWith('Release')", timeout=SLOW_MS)
    ws = sockets[0]
    ws.on("framesent", lambda f: sent.append(json.loads(f)))
    ws.on("framereceived", lambda f: got.append(json.loads(f)))
    page.wait_for_timeout(1500)
    with ws.expect_event("framereceived", timeout=SLOW_MS,
                         predicate=lambda f: '"response.output_audio.delta"' in f):
        page.dispatch_event("#rt-talk", "pointerup")
    page.dispatch_event("#rt-talk", "pointerdown")          # talk over it
    with ws.expect_event("framereceived", timeout=SLOW_MS,
                         predicate=lambda f: '"conversation.item.truncated"' in f):
        pass
    page.dispatch_event("#rt-talk", "pointerup")
    message = [e["item"]["id"] for e in got if e["type"] == "response.output_item.added"
               and e["item"]["type"] == "message"][0]
    cut = [e for e in sent if e["type"] == "conversation.item.truncate"]
    assert len(cut) == 1 and cut[0]["item_id"] == message
    played = sum(len(base64.b64decode(e["delta"])) for e in got
                 if e["type"] == "response.output_audio.delta") / 2 / 24000 * 1000
    assert 0 <= cut[0]["audio_end_ms"] <= played + 1
    kinds = [e["type"] for e in sent]
    if "response.cancel" in kinds:                          # still being made when pressed
        assert kinds.index("response.cancel") < kinds.index("conversation.item.truncate")
    assert [e["item_id"] for e in got if e["type"] == "conversation.item.truncated"] == \
        [message]
    assert not [e for e in got if e["type"] == "error"]
    assert tab.console_errors == []


def test_a_document_upload_converts_page_by_page(tab, tmp_path):
    doc = tmp_path / "page.html"
    doc.write_text("<html><body><h1>Hello page</h1><p>Converted in the browser.</p>"
                   "</body></html>")
    page = tab.open("documents")
    page.wait_for_selector('#doc-model option[value="docling"]', state="attached")
    page.set_input_files("#doc-file", str(doc))
    with page.expect_response("**/v1/documents/convert", timeout=SLOW_MS) as resp:
        page.click('#doc-form button[type="submit"]')
    assert resp.value.status == 200
    done = '#doc-pages-out [data-page="1"]:not(.pending)'
    page.wait_for_selector(done, timeout=SLOW_MS)
    assert "Hello page" in page.inner_text(done)
    wait_text(page, "doc-state", "1 pages converted", timeout=SLOW_MS)
    tab.screenshot("documents")
    assert tab.console_errors == []


def test_views_whose_routes_are_missing_say_so(tab, server):
    page = tab.open("entities")
    assert "no entity_extraction model" in page.inner_text("#ent-model")
    tab.screenshot("entities")
    tab.tab("logs")
    has_log = httpx.get(server.base + "/v1/logs", timeout=10).status_code == 200
    expected = "shown" if has_log else "no request log yet"
    wait_text(page, "logs-state", expected)
    tab.screenshot("logs")
    tab.tab("tiers")
    page.click('#tiers-models tr[data-model="kokoro"] button[data-toggle="disable"]')
    has_toggle = httpx.post(server.base + "/v1/models/nope/disable", timeout=10).json()[
        "error"]["type"] != "not_found"
    expected = "kokoro disabled" if has_toggle else "does not offer that action yet"
    wait_text(page, "tiers-message", expected)


def test_api_key_is_asked_once_and_kept_for_the_tab(browser, tmp_path):
    srv = _serve(tmp_path, f'models_dir = "{tmp_path}"\n[server]\napi_keys = ["sekrit"]\n')
    try:
        t = Page(browser, srv.base)
        page = t.open("tiers")
        page.wait_for_selector("#key-dialog[open]")
        page.fill("#key-input", "wrong")
        page.click('#key-form button[type="submit"]')
        wait_text(page, "key-reason", "refused")
        assert page.is_visible("#key-dialog")
        page.fill("#key-input", "sekrit")
        page.click('#key-form button[type="submit"]')
        page.wait_for_selector('.lane[data-tier="tier1_gpu_vram"]')
        assert page.evaluate("sessionStorage.getItem('hypnos.apiKey')") == "sekrit"
        page.reload()
        page.wait_for_selector('.lane[data-tier="tier1_gpu_vram"]')
        page.wait_for_timeout(2500)        # one more poll, still no question
        assert not page.is_visible("#key-dialog")
        t.screenshot("api-key")
        assert not t.page_errors
        # Only the two unauthenticated tries failed: the first load and the wrong key.
        assert len([e for e in t.console_errors if "401" in e]) == len(t.console_errors) <= 4
        t.context.close()
    finally:
        srv.stop()



def test_a_layer_split_and_an_eviction_on_a_simulated_gpu(browser, tmp_path):
    """A 250 MiB tier 1 (simulated discrete GPU): SmolLM2 is staged split across tiers 1
    and 2; promoting a second copy from the page evicts it, which the timeline shows."""
    require_smollm2()
    smol = ('modality = "text_generation"\nengine = "ggml_llama"\ncontext_len = 2048\n'
            'weights_path = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"\n')
    srv = _serve(tmp_path, f'models_dir = "{MODELS_DIR}"\n[hardware.simulate]\n'
                           f'vram_bytes = {(512 + 250) * 2**20}\nram_bytes = {8 * 2**30}\n'
                           f'[[models]]\nid = "smol"\ninitial_tier = "tier1_gpu_vram"\n{smol}'
                           f'[[models]]\nid = "smol2"\n{smol}')
    t = Page(browser, srv.base)
    try:
        page = t.open("tiers")
        placement = next(m for m in srv.status()["models"] if m["id"] == "smol")["placement"]
        assert placement["gpu_layers"] > 0 and placement["pinned_ram_layers"] > 0
        split = f'{placement["gpu_layers"]} / {placement["pinned_ram_layers"]} / 0'
        for tier in ("tier1_gpu_vram", "tier2_pinned_ram"):
            block = page.wait_for_selector(
                f'.lane[data-tier="{tier}"] .block.split[data-model="smol"]')
            assert block.inner_text().endswith(split)
        assert page.inner_text('#tiers-models tr[data-model="smol"] td:nth-child(4)') == split
        assert "simulated" in page.inner_text("#server-info")
        assert page.locator("#tiers-timeline .dot").count() == 0
        page.click('#tiers-models tr[data-model="smol2"] button[data-move="tier1_gpu_vram"]')
        page.wait_for_selector("#tiers-timeline .dot", timeout=SLOW_MS)
        entry = page.inner_text("#tiers-evictions li")
        assert "smol → T" in entry and "for smol2" in entry and "memory_budget" in entry
        page.wait_for_selector('.lane[data-tier="tier1_gpu_vram"] .block[data-model="smol2"]')
        t.screenshot("tiers-split-and-eviction")
        assert not t.page_errors and t.console_errors == []
    finally:
        t.context.close()
        srv.stop()
