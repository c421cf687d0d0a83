"""`hypnos chat`'s pure parts: the slash-command parser and multi-line input, the
conversation's request bodies, the SSE and chunk parsing, model choice, the advice on a
refusal, the footer and the folding thinking block; and the command's exit when no server
answers."""
from __future__ import annotations

import io

import pytest
from click.testing import CliRunner
from rich.console import Console

from hypnos.bench.harness import free_port
from hypnos.cli.chat import api
from hypnos.cli.chat.attach import AttachError, attach, kind_of
from hypnos.cli.chat.commands import (
    Command, CommandError, Message, help_lines, parse, read_input,
)
from hypnos.cli.chat.session import Attachment, Session
from hypnos.cli.chat.view import (
    AnswerView, Tail, footer, models_table, tier_move, tiers_table,
)
from hypnos.cli.client import Client, ServerSaidNo, Unreachable
from hypnos.cli.main import cli

STATUS = {"models": [
    {"id": "gemma", "modality": "text_generation", "modalities": ["text_generation", "vision",
                                                                  "speech_to_text"],
     "current_tier": "tier2_pinned_ram", "enabled": True},
    {"id": "smol", "modality": "text_generation", "modalities": ["text_generation"],
     "current_tier": "tier1_gpu_vram", "enabled": True,
     "placement": {"gpu_layers": 30, "allocated_context_len": 2048}},
    {"id": "off", "modality": "text_generation", "modalities": ["text_generation"],
     "current_tier": "tier1_gpu_vram", "enabled": False},
    {"id": "whisper", "modality": "speech_to_text", "modalities": ["speech_to_text"],
     "current_tier": "tier3_nvme_ssd", "enabled": True},
    {"id": "docling", "modality": "document_conversion", "current_tier": "tier3_nvme_ssd"},
]}


def render(renderable) -> str:
    out = Console(file=io.StringIO(), width=100, no_color=True)
    out.print(renderable)
    return out.file.getvalue()


# ------------------------------------------------------------------ commands

@pytest.mark.parametrize("line,parsed", [
    ("hello", Message("hello")),
    ("  ", None),
    ("/bye", Command("bye")),
    ("/QUIT", Command("bye")),
    ("/exit", Command("bye")),
    ("/model", Command("model")),
    ("/model  smol ", Command("model", "smol")),
    ("/models", Command("model")),
    ("/system Be terse.", Command("system", "Be terse.")),
    ("/think ON", Command("think", "on")),
    ("/think show", Command("think", "show")),
    ("/file 'my photo.png'", Command("file", "my photo.png")),
    ("/file a b.pdf", Command("file", "a b.pdf")),
    ("//etc/hosts is a path", Message("/etc/hosts is a path")),
    ("/clear", Command("clear")),
    ("/help", Command("help")),
    ("/?", Command("help")),
])
def test_parse(line, parsed):
    assert parse(line) == parsed


@pytest.mark.parametrize("line,says", [
    ("/nope", "unknown command /nope"),
    ("/think maybe", "on, off or show"),
    ("/think", "on, off or show"),
    ("/file", "needs a path"),
    ("/clear now", "takes no argument"),
    ("/bye bye", "takes no argument"),
])
def test_parse_refuses_with_what_to_type(line, says):
    with pytest.raises(CommandError, match=says):
        parse(line)


def test_a_multi_line_message_starting_with_a_slash_is_a_message():
    assert parse("/not a command\nsecond line") == Message("/not a command\nsecond line")


def feed(*lines: str):
    """A ``read(prompt)`` that answers ``lines`` in turn (then EOF) and logs the prompts."""
    it, prompts = iter(lines), []

    def read(prompt: str) -> str:
        prompts.append(prompt)
        try:
            return next(it)
        except StopIteration:
            raise EOFError from None
    return read, prompts


def test_a_trailing_backslash_continues_the_line():
    read, prompts = feed("first \\", "second\\", "third", "next input")
    assert read_input(read, "> ", ". ") == "first \nsecond\nthird"
    assert prompts == ["> ", ". ", ". "]


def test_a_triple_quote_block_is_taken_verbatim():
    read, prompts = feed('"""', "  indented \\", "", "/not a command", '"""', "after")
    assert read_input(read, "> ", ". ") == "  indented \\\n\n/not a command"
    assert prompts == ["> "] + [". "] * 4


def test_eof_ends_a_block_and_leaves_at_the_first_line():
    read, _ = feed('"""', "one line")
    assert read_input(read, "> ", ". ") == "one line"
    read, _ = feed()
    with pytest.raises(EOFError):
        read_input(read, "> ", ". ")


def test_help_lists_every_command():
    text = "\n".join(help_lines())
    for name in ("model", "system", "think", "file", "clear", "tier", "help", "bye"):
        assert f"/{name}" in text


# ------------------------------------------------------------------ session

def test_the_request_carries_system_history_and_switches():
    s = Session("smol", system="Be terse.", max_tokens=16)
    first = s.user_message("hi")
    body = s.request(first)
    assert body["messages"] == [{"role": "system", "content": "Be terse."}, first]
    assert body["stream"] is True and body["max_tokens"] == 16
    assert "think" not in body and "reasoning_effort" not in body
    s.record(first, "hello", "thoughts")
    s.think = True
    body = s.request(s.user_message("again"))
    assert body["think"] is True
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "user"]
    assert "thoughts" not in str(body["messages"])          # thoughts never go back
    s.think = False
    assert s.request(s.user_message("x"))["reasoning_effort"] == "none"
    s.clear()
    assert s.request(s.user_message("x"))["messages"][1:] == [s.user_message("x")]


def test_attachments_go_with_the_next_message_then_are_spent():
    s = Session("gemma")
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}
    s.pending += [Attachment("a.png", "image", part=image),
                  Attachment("clip.wav", "audio", text="hello there"),
                  Attachment("n.pdf", "document", text="# Notes")]
    user = s.user_message("What now?")
    assert user["content"][1:] == [image]
    text = user["content"][0]["text"]
    assert text.index("Transcript of clip.wav:\n\nhello there") < text.index("Contents of n.pdf")
    assert text.endswith("What now?")
    s.record(user, "answer", "")
    assert s.pending == [] and s.user_message("next") == {"role": "user", "content": "next"}


# ------------------------------------------------------------------ api

def test_sse_payloads_skip_comments_and_stop_at_done():
    lines = [": keep-alive", "", 'data: {"a": 1}', "event: x", 'data:{"b": 2}', "data: [DONE]",
             'data: {"c": 3}']
    assert list(api.sse_payloads(lines)) == [{"a": 1}, {"b": 2}]


def test_events_of_each_chunk():
    chunk = lambda delta, reason=None, **top: {"choices": [  # noqa: E731
        {"index": 0, "delta": delta, "finish_reason": reason}], **top}
    assert api.events_of(chunk({"role": "assistant", "content": ""})) == []
    assert api.events_of(chunk({"reasoning_content": "hm"})) == [api.Delta(reasoning="hm")]
    assert api.events_of(chunk({"content": "Hi"})) == [api.Delta(content="Hi")]
    usage, tele = {"completion_tokens": 3}, {"previous_tier": "tier1_gpu_vram"}
    assert api.events_of(chunk({}, "stop", usage=usage, hypnos_telemetry=tele)) == [
        api.Finish("stop", usage, tele)]
    with pytest.raises(api.StreamFailed, match="engine broke"):
        api.events_of(chunk({}, "error", error={"message": "engine broke"}))


def test_model_choice():
    assert [m["id"] for m in api.chat_models(STATUS)] == ["gemma", "smol"]
    assert api.default_model(STATUS) == "smol"                 # already in tier 1
    assert api.model_for(STATUS, "speech_to_text") == "whisper"  # the dedicated one first
    assert api.model_for(STATUS, "document_conversion") == "docling"
    assert api.model_for(STATUS, "text_to_speech") is None
    assert api.default_model({"models": []}) is None


@pytest.mark.parametrize("url,command", [
    ("http://127.0.0.1:9999", "hypnos serve"),
    ("http://localhost:8080/", "hypnos serve --port 8080"),
    ("https://gpu-box:9999", "hypnos serve --host gpu-box"),
])
def test_serve_command(url, command):
    assert api.serve_command(url) == command


def test_advice_names_the_setting_to_change():
    url = "http://box:9999"
    assert "HYPNOS_API_KEY" in api.advice(ServerSaidNo(401, "Missing API key", None, None), url)
    host = ServerSaidNo(403, "Host 'box' is not a name of this server, so the request is "
                        "refused", "permission_denied", None)
    assert "server.allowed_hosts" in api.advice(host, url)
    admin = ServerSaidNo(403, "needs an admin key", "permission_denied", None)
    assert "admin" in api.advice(admin, url)
    gone = api.advice(Unreachable("refused"), url)
    assert "hypnos serve --host box" in gone and "on that machine" in gone
    assert api.advice(ServerSaidNo(400, "bad", "invalid_request_error", None), url) is None


# ------------------------------------------------------------------ attach

@pytest.mark.parametrize("name,kind", [("a.PNG", "image"), ("b.jpeg", "image"),
                                       ("c.wav", "audio"), ("d.mp3", "audio"),
                                       ("e.pdf", "document"), ("f.docx", "document")])
def test_kind_of(name, kind, tmp_path):
    assert kind_of(tmp_path / name) == kind


def test_attach_refuses_what_the_chat_cannot_take(tmp_path):
    client = Client("http://127.0.0.1:1")          # never reached: each refusal comes first
    with pytest.raises(AttachError, match="no such file"):
        attach(client, STATUS, "smol", tmp_path / "missing.png")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(AttachError, match="not an image"):
        attach(client, STATUS, "smol", tmp_path / "notes.txt")
    (tmp_path / "red.png").write_bytes(b"\x89PNG")
    with pytest.raises(AttachError, match="smol has no vision.*/model gemma"):
        attach(client, STATUS, "smol", tmp_path / "red.png")
    a = attach(client, STATUS, "gemma", tmp_path / "red.png")
    assert a.part["image_url"]["url"] == "data:image/png;base64,iVBORw=="
    (tmp_path / "clip.wav").write_bytes(b"RIFF")
    with pytest.raises(AttachError, match="no model on this server transcribes"):
        attach(client, {"models": STATUS["models"][1:2]}, "smol", tmp_path / "clip.wav")


# ------------------------------------------------------------------ view

def test_footer():
    usage = {"completion_tokens": 40, "prompt_tokens_details": {"cached_tokens": 31}}
    tele = {"previous_tier": "tier1_gpu_vram", "placement": {"primary_tier": "tier1_gpu_vram"},
            "tier_switch_latency_ms": 0, "evicted_models": [],
            "engine": {"decode_tokens_per_s": 12.34}}
    assert footer(usage, tele, 9.0) == "12.3 tok/s, 40 tokens, 31 cached, no tier move"
    # No engine speed: the tokens over the wall time; no cached_tokens field: 0.
    assert footer({"completion_tokens": 10}, {}, 4.0) == \
        "2.5 tok/s, 10 tokens, 0 cached, no tier move"


def test_tier_move():
    moved = {"previous_tier": "tier3_nvme_ssd", "placement": {"primary_tier": "tier1_gpu_vram"},
             "tier_switch_latency_ms": 812.0, "evicted_models": ["big", "other"]}
    assert tier_move(moved) == "moved tier 3 -> tier 1 in 0.81 s; evicted big other"
    reloaded = {"previous_tier": "tier1_gpu_vram",
                "placement": {"primary_tier": "tier1_gpu_vram"}, "tier_switch_latency_ms": 300}
    assert tier_move(reloaded) == "loaded in 0.30 s"


def test_thoughts_show_while_thinking_then_fold_to_one_line():
    view = AnswerView()
    view.add("", "Let me think.\nThe user wants", 0.5)
    assert "thinking...\nLet me think.\nThe user wants" in render(view.renderable())
    view.add("**Paris**", "", 1.25)
    shown = render(view.renderable())
    assert "[thought for 1.2 s, 6 words; /think show expands]" in shown
    assert "Paris" in shown and "**" not in shown and "Let me think" not in shown
    only = AnswerView()
    only.add("", "no answer came", 0.1)
    only.done = True
    assert render(only.renderable()).strip() == "[thought, 3 words; /think show expands]"


def test_a_tall_answer_streams_its_last_lines():
    text = "\n".join(f"line {i}" for i in range(30))
    shown = render(Tail(text, 4)).splitlines()
    assert shown == ["line 26", "line 27", "line 28", "line 29"]
    assert render(Tail("short", 4)).splitlines() == ["short"]


def test_model_and_tier_tables():
    listed = render(models_table(STATUS, "smol"))
    assert "* smol" in " ".join(listed.split()) and "gemma" in listed
    assert "whisper" not in listed and "off" not in listed.split()
    tiers = render(tiers_table(STATUS))
    assert tiers.index("smol") < tiers.index("gemma") < tiers.index("whisper")
    assert "30/0/0" in tiers


# ------------------------------------------------------------------ the command

def test_no_server_exits_3_with_the_serve_command():
    port = free_port()
    r = CliRunner().invoke(cli, ["chat", "--url", f"http://127.0.0.1:{port}"],
                           env={"HYPNOS_API_KEY": None})
    assert r.exit_code == 3, r.output
    assert f"hypnos serve --port {port}" in r.output and "cannot reach" in r.output
