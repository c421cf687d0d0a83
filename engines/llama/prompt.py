"""Building a llama prompt: the chat template rendered over the request's messages, media
markers, tokenization, and what the answer's reader needs (the splitter, the thinking budget).

Plain functions over what a loaded ``LlamaChatEngine`` holds (its chat format, formatter,
vocabulary, BOS token, projector), called in the caller's thread before a job is queued.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from collections.abc import Callable

from hypnos.engines.chat_format.grammar import response_grammar
from hypnos.engines.chat_format.harmony import HarmonySplitter
from hypnos.engines.chat_format.prepare import MEDIA_PARTS, ChatFormat, prepare
from hypnos.engines.chat_format.stream import AnswerSplitter
from hypnos.engines.errors import EngineError
from hypnos.engines.llama.prompt_cache_entries import common_prefix
from hypnos.engines.llama.sampling import ThinkBudget
from hypnos.engines.records import ChatRequest

#: (text, parse_special) -> tokens.
Tokenize = Callable[[str, bool], list[int]]
#: (messages, tools, template variables) -> the rendered prompt text.
Render = Callable[[list[dict], "list[dict] | None", dict], str]


@dataclass
class Built:
    """A request made ready for the decode thread, and how to read its answer."""
    prompt: list[int]
    grammar: str | None
    think: ThinkBudget | None
    splitter: AnswerSplitter | HarmonySplitter
    chunks: object = None                      # mtmd.Chunks when media are sent
    prefill: object = None                     # (ctx, seq_id) -> n_past, on the decode thread
    format_status: str | None = None           # how response_format was applied


def build(req: ChatRequest, fmt: ChatFormat | None, tokenize: Tokenize, render: Render,
          bos: int | None, bos_text: str, projector, n_batch: int) -> Built:
    """The prompt tokens, the grammar, the thinking budget and the answer's reader.
    ``bos`` is the token to start with (None when the model adds none) and ``bos_text``
    its text; ``projector`` the model's ``mtmd.Projector`` (or None)."""
    if req.prompt is not None:              # /v1/completions: the text as it is
        tokens = tokenize(req.prompt, True)
        if bos is not None and (not tokens or tokens[0] != bos):
            tokens.insert(0, bos)
        return Built(tokens, req.grammar, None, AnswerSplitter())
    grammar, format_status = req.grammar, None
    if req.response_format is not None:
        grammar, format_status = response_grammar(req.response_format)
    prepared = prepare(fmt, req.messages, req.tools, req.tool_choice, req.think_budget,
                       grammar)
    text = render(prepared.messages, prepared.tools, prepared.template_vars)
    text += prepared.prefix
    think = fmt.think
    in_think = think is not None and text.rstrip().endswith(think.open.rstrip())
    budget = prepared.think_budget
    tracker = None
    if in_think and budget == 0:            # the template opened it; close it at once
        text += think.closing
        in_think = False
    if think is not None and budget is not None:
        tracker = ThinkBudget(think.open, think.close, tokenize(think.closing, True),
                              budget, state="in" if in_think else "maybe")
    names = frozenset(t["function"]["name"] for t in req.tools or ())
    tools = fmt.tools if prepared.tools_active else None
    splitter: AnswerSplitter | HarmonySplitter
    if fmt.harmony:
        splitter = HarmonySplitter(tools=tools, prefix=prepared.prefix, known=names,
                                   offered=req.tools, forced=prepared.forced)
    else:
        splitter = AnswerSplitter(think=think, in_think=in_think, tools=tools,
                                  prefix=prepared.prefix, known=names, offered=req.tools,
                                  forced=prepared.forced)
    if req.media:
        built = build_media(text, req.media, prepared.grammar, tracker, splitter, projector,
                            bos, bos_text, n_batch)
    else:
        tokens = tokenize(text, True)
        if not tokens:
            raise EngineError("the chat template rendered an empty prompt")
        if bos is not None and tokens[0] != bos:
            tokens.insert(0, bos)
        built = Built(tokens, prepared.grammar, tracker, splitter)
    built.format_status = format_status
    return built


def build_media(text: str, media: list[bytes], grammar: str | None,
                tracker: ThinkBudget | None, splitter: AnswerSplitter | HarmonySplitter,
                projector,
                bos: int | None, bos_text: str, n_batch: int) -> Built:
    """Images / audio through the projector: the text and media chunks are evaluated
    together on the decode thread when the job starts (``Job.prefill``); the prompt
    is then placeholders (-1, never a prefix match) for the cells they fill."""
    if projector is None:
        raise EngineError("this model has no vision / audio projector (mmproj)")
    add_bos = bos is not None and not text.startswith(bos_text)
    chunks = projector.tokenize(text, media, add_special=add_bos)

    def prefill(ctx, seq_id: int) -> int:
        return projector.evaluate(ctx, chunks, seq_id, 0, n_batch)

    return Built([-1] * chunks.n_tokens, grammar, tracker, splitter, chunks, prefill)


#: Marked prefixes followed per request (Anthropic allows four cache_control marks).
MAX_MARKS = 4


def mark_positions(req: ChatRequest, prompt: list[int],
                   build: Callable[[ChatRequest], Built]) -> list[int]:
    """Where the prefixes the client marked (``req.cache_marks``, message indices) end in
    ``prompt``'s tokens: the prompt rendered up to and including the marked message agrees
    with the whole one that far (its generation prompt parts at the next role's header). A
    template that will not render a conversation without a user turn (Qwen 3.5's) gets an
    empty one after the marked message. Marks past the last message, marks a template
    refuses either way, and any on a prompt with media give none. Costs a render and a
    tokenization per mark (``MAX_MARKS`` at most, the last ones)."""
    if req.media or req.prompt is not None:
        return []
    out = []
    for i in sorted(set(req.cache_marks))[-MAX_MARKS:]:
        if not 0 <= i < len(req.messages) - 1:
            continue
        head = None
        for tail in ([], [{"role": "user", "content": ""}]):
            try:
                head = build(replace(req, messages=[*req.messages[:i + 1], *tail],
                                     response_format=None, grammar=None, cache_marks=()))
                break
            except EngineError:
                continue
        if head is None:
            continue
        n = common_prefix(head.prompt, prompt)
        if 0 < n < len(prompt):
            out.append(n)
    return sorted(set(out))


def render(formatter, messages: list[dict], tools: list[dict] | None, variables: dict,
           marker: str | None) -> str:
    """The chat template (llama-cpp-python's ``Jinja2ChatFormatter``) over ``messages``,
    each media part written as the projector's ``marker``."""
    if formatter is None:
        raise EngineError("model not loaded")
    try:
        return formatter(messages=[text_message(m, marker) for m in messages],
                         tools=tools, **variables).prompt
    except EngineError:
        raise
    except Exception as exc:                   # jinja2 errors, raise_exception(...)
        raise EngineError(f"chat template failed: {exc}") from exc


def tokenize(ll, vocab, text: str, parse_special: bool) -> list[int]:
    """``text`` as tokens (no BOS/EOS added). ``ll`` is ``llama_cpp.llama_cpp``."""
    if vocab is None:
        raise EngineError("model not loaded")
    raw = text.encode("utf-8")
    cap = len(raw) + 8
    buf = (ll.llama_token * cap)()
    n = ll.llama_tokenize(vocab, raw, len(raw), buf, cap, False, parse_special)
    if n < 0:
        cap = -n
        buf = (ll.llama_token * cap)()
        n = ll.llama_tokenize(vocab, raw, len(raw), buf, cap, False, parse_special)
    if n < 0:
        raise EngineError("tokenization failed")
    return list(buf[:n])


def text_message(message: dict, marker: str | None = None) -> dict:
    """A message whose content is plain text: text parts joined, each media part replaced
    by the projector's ``marker`` where it appears (a marker typed in the text is removed,
    so it cannot shift the media)."""
    content = message.get("content")
    if isinstance(content, list):
        pieces = []
        for part in content:
            kind = part.get("type")
            if kind in MEDIA_PARTS:
                if marker is None:
                    raise EngineError(f"this model takes text only, got a {kind} part")
                pieces.append(marker)
            else:
                text = part.get("text", "")
                pieces.append(text.replace(marker, "") if marker else text)
        content = "".join(pieces)
    elif isinstance(content, str) and marker:
        content = content.replace(marker, "")
    return {**message, "content": content if content is not None else ""}
