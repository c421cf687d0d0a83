"""Claude Code's billing header is dropped before the prompt is built (issue #36): its first
system block changes with every prompt a few tokens in, which kept every later token out of
the prefix cache (pure: the Messages converter only)."""
from __future__ import annotations

from hypnos.service.wire.messages import billing_header_dropped, count_body, to_chat_body
from hypnos.service.wire.messages import TextBlock

PROMPT = "You are Claude Code, Anthropic's official CLI for Claude."


def claude_code_body(version: str) -> dict:
    """The system blocks Claude Code 2.1.197 sends, with the header of one prompt."""
    return {"model": "m", "max_tokens": 32000, "messages": [
        {"role": "user", "content": "list the files"}], "system": [
        {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.197.{version}; "
                                 "cc_entrypoint=sdk-cli;"},
        {"type": "text", "text": PROMPT, "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "# Tools\nUse the tools.", "cache_control": {
            "type": "ephemeral"}}]}


def test_prompts_differing_only_in_the_billing_header_become_the_same_chat():
    _, first = to_chat_body(claude_code_body("417"))
    _, second = to_chat_body(claude_code_body("860"))
    assert first == second                     # the same text: the same tokens, all reusable
    system = first["messages"][0]
    assert system == {"role": "system", "content": PROMPT + "# Tools\nUse the tools."}
    assert count_body(claude_code_body("417"))["messages"] == first["messages"]


def test_only_the_billing_header_is_dropped():
    plain = [TextBlock(type="text", text=PROMPT)]
    assert billing_header_dropped(plain) == plain
    assert billing_header_dropped(None) is None
    assert billing_header_dropped(PROMPT) == PROMPT
    # A header quoted later in the prompt is the user's text, kept.
    quoted = f"{PROMPT}\nx-anthropic-billing-header: cc_version=1;"
    assert billing_header_dropped(quoted) == quoted
    assert billing_header_dropped(
        f"x-anthropic-billing-header: cc_version=2.1.197.417;\n{PROMPT}") == PROMPT
    _, alone = to_chat_body({"model": "m", "max_tokens": 5, "system": [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197.1;"}],
        "messages": [{"role": "user", "content": "hi"}]})
    assert [m["role"] for m in alone["messages"]] == ["user"]    # no empty system message
