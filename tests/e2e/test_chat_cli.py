"""`hypnos chat` in a pseudo-terminal (pexpect) against a real `hypnos serve` with an API
key: a question typed and its streamed answer and footer read, the prompt cache on the
second turn, /model, /file with an image (refused by a text model, sent to a vision one),
an audio clip (transcribed by Whisper) and a PDF (converted by docling), thinking, a wrong
key, /bye and Ctrl-D.

The models are the lineup's small real ones: SmolLM2-135M ("smol"), the same weights with a
tiny random-weight vision projector ("smol-vision": noise answers, real image plumbing) and
with a Qwen3-style thinking template ("thinker"), Whisper tiny.en, Kokoro and docling. Only
structure is asserted (footers, counts, notes), never what a model says.
"""
from __future__ import annotations

import io
import os
import re
import sys

import httpx
import pexpect
import pytest

from conftest import MODELS_DIR, ROOT
from model_dirs import models_dir

from harness import ServerProcess  # bench/, put on the path by model_dirs

pytestmark = [pytest.mark.real, pytest.mark.slow]
KEY = "chat-test-key"
CONFIG = f"""
[server]
api_keys = ["{KEY}"]

[[models]]
id = "smol"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "smol.gguf"
context_len = 2048
initial_tier = "tier3_nvme_ssd"

[[models]]
id = "smol-vision"
modality = "text_generation"
modalities = ["vision"]
engine = "ggml_llama"
weights_path = "smol.gguf"
aux_path = "tiny-mmproj.gguf"
context_len = 2048

[[models]]
id = "thinker"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "thinker.gguf"
context_len = 2048

[[models]]
id = "whisper"
modality = "speech_to_text"
engine = "faster_whisper"
weights_path = "whisper-tiny.en"

[[models]]
id = "kokoro"
modality = "text_to_speech"
engine = "onnx_runtime"
weights_path = "kokoro-82m/kokoro-v1.0.int8.onnx"
voices_path = "kokoro-82m/voices_ja.npz"

[[models]]
id = "docling"
modality = "document_conversion"
engine = "docling"
"""
# "12.3 tok/s, 40 tokens, 31 cached, no tier move": the footer after every answer.
FOOTER = re.compile(r"(\d+\.\d) tok/s, (\d+) tokens, (\d+) cached, ([^\r\n\x1b]*)(?:\x1b\[0m)?\r\n")
PROMPT = "\n> "
TIMEOUT = 300          # seconds for one answer on a slow, busy machine


def _link_tree(src, dst) -> None:
    """Hard links of every file under ``src`` at the same place under ``dst``."""
    for path in src.rglob("*"):
        if path.is_file():
            target = dst / path.relative_to(src.parent)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.link(path, target)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chat-cli")
    models = models_dir(tmp / "models", smol=True, thinker=True, vision=True)
    _link_tree(MODELS_DIR / "whisper-tiny.en", models)
    _link_tree(MODELS_DIR / "kokoro-82m", models)
    (tmp / "hypnos.toml").write_text(f'models_dir = "{models}"\n' + CONFIG)
    srv = ServerProcess(tmp / "hypnos.toml", tmp / "server.log", ready_timeout=180,
                        env={"HYPNOS_MODELS_DIR": str(models)})
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def files(server, tmp_path_factory):
    """A red PNG, a spoken WAV (the server's own Kokoro), a one-page text PDF and a text
    file (which /file refuses)."""
    from PIL import Image
    from reportlab.pdfgen import canvas
    tmp = tmp_path_factory.mktemp("chat-files")
    Image.new("RGB", (40, 40), (200, 30, 30)).save(tmp / "red.png")
    speech = httpx.post(server.base + "/v1/audio/speech", timeout=600,
                        headers={"Authorization": f"Bearer {KEY}"},
                        json={"model": "kokoro", "voice": "alloy",
                              "input": "Please tell me a short story about a lighthouse."})
    assert speech.status_code == 200, speech.text
    (tmp / "clip.wav").write_bytes(speech.content)
    buf = io.BytesIO()
    c = canvas.Canvas(buf)
    c.drawString(72, 720, "The meeting moved to Tuesday at noon, in the room by the stairs.")
    c.showPage()
    c.save()
    (tmp / "note.pdf").write_bytes(buf.getvalue())
    (tmp / "notes.txt").write_text("plain text is typed or pasted, not attached\n")
    return tmp


def chat(server, *args: str, key: str | None = KEY, url: str | None = None):
    env = {**os.environ, "HYPNOS_URL": url or server.base, "TERM": "xterm-256color",
           "LANG": "C.UTF-8", "HF_HUB_OFFLINE": "1"}
    env.pop("HYPNOS_API_KEY", None)
    if key is not None:
        env["HYPNOS_API_KEY"] = key
    child = pexpect.spawn(sys.executable, ["-m", "hypnos.cli", "chat", *args], env=env,
                          cwd=str(ROOT), encoding="utf-8", timeout=TIMEOUT, dimensions=(50, 200))
    return child


def ask(child, text: str) -> re.Match:
    """Type ``text``, wait for the answer's footer and the next prompt; the footer's match."""
    child.sendline(text)
    child.expect(FOOTER)
    match = child.match
    child.expect_exact("> ")          # the footer's line end is in the match
    return match


def note(child, line: str, pattern: str) -> str:
    """Type a command, read up to the next prompt; what came before it must match."""
    child.sendline(line)
    child.expect_exact(PROMPT)
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", child.before)
    assert re.search(pattern, shown), shown
    return shown


def bye(child, how: str = "/bye") -> None:
    if how == "/bye":
        child.sendline("/bye")
    else:
        child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_a_conversation_streams_answers_with_a_footer_and_reuses_the_prompt(server):
    child = chat(server, "smol", "--max-tokens", "8")
    child.expect_exact(PROMPT)
    first = ask(child, "What is the capital of France?")
    speed, tokens, cached, move = first.groups()
    assert float(speed) > 0 and 1 <= int(tokens) <= 8
    assert move.startswith("moved tier 3 -> tier 1 in ")      # smol starts on disk
    second = ask(child, "And of Italy?")
    assert int(second.group(3)) > 0                             # the first turn's prefix
    assert second.group(4).startswith("no tier move")
    shown = note(child, "/model", r"\* +smol +tier 1")
    assert "smol-vision" in shown and "thinker" in shown and "whisper" not in shown
    note(child, "/model smol-vision", "now chatting with smol-vision")
    third = ask(child, "One more word?")
    assert int(third.group(2)) >= 1
    note(child, "/model nope", "no chat model 'nope'")
    note(child, "/tier", r"smol-vision +tier 1")
    note(child, "/help", "/file PATH")
    bye(child)


def test_files_an_image_audio_and_a_pdf(server, files):
    child = chat(server, "smol", "--max-tokens", "8")
    child.expect_exact(PROMPT)
    note(child, f"/file {files / 'red.png'}",
         "smol has no vision.*switch with /model smol-vision")
    note(child, "/model smol-vision", "now chatting with smol-vision")
    note(child, f"/file {files / 'red.png'}", r"attached red\.png \(image\)")
    assert int(ask(child, "What colour is it?").group(2)) >= 1
    shown = note(child, f"/file {files / 'clip.wav'}",
                 r"attached clip\.wav \(transcript, \d+ characters: ")
    transcript = shown.split("characters: ", 1)[1].split("); it goes")[0]
    assert len(transcript.split()) >= 3
    assert int(ask(child, "Answer that.").group(2)) >= 1
    note(child, f"/file {files / 'note.pdf'}", r"attached note\.pdf \(Markdown, \d+ characters")
    assert int(ask(child, "When is the meeting?").group(2)) >= 1
    note(child, f"/file {files / 'missing.pdf'}", "no such file")
    note(child, f"/file {files / 'notes.txt'}", "not an image")
    bye(child, "ctrl-d")


def test_thinking_folds_to_one_line_and_show_expands_it(server):
    child = chat(server, "thinker", "--max-tokens", "24")
    child.expect_exact(PROMPT)
    note(child, "/think on", "thinking on")
    # The thinker has random weights: an answer may end at its first token (an end of turn,
    # nothing to fold), whatever the machine's greedy path; another question then follows.
    questions = ["Write a story about a dragon.", "Describe the sea.", "List three fruits."]
    thought = re.compile(r"\[thought( for [\d.]+ s)?, (\d+) words; /think show expands\]")
    for question in questions:
        child.sendline(question)
        if child.expect([thought, FOOTER]) == 0:
            assert int(child.match.group(2)) >= 1
            child.expect(FOOTER)
            child.expect_exact("> ")
            break
        assert child.match.group(2) == "0"          # only an empty answer folds nothing
        child.expect_exact("> ")
    else:
        raise AssertionError(f"no thoughts in {len(questions)} answers")
    shown = note(child, "/think show", r"\w")
    assert "(no thoughts)" not in shown
    note(child, "/think off", "thinking off")
    bye(child)


def test_a_wrong_key_names_the_setting_to_change(server):
    child = chat(server, key="wrong")
    child.expect(pexpect.EOF)
    child.close()
    out = child.before
    assert child.exitstatus == 1
    assert "HYPNOS_API_KEY" in out and "server.api_keys" in out and "401" in out
