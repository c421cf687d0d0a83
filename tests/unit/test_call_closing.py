"""A forced call always closes (issue #29): the GBNF walk (``gbnf``) follows each dialect's
forced-call grammar as llama.cpp does, its closing from any point of a call is text the
grammar accepts whole and the dialect's parser reads as a call with every required key, and
``CallCloser`` keeps a call closable within ``max_tokens`` whatever the model writes.

Model-free: llama.cpp's own grammar engine (``gbnf_check``) judges every completed text, the
"models" are scripted or random walks over the grammar, the tokenizer a fixed chunking.
"""
import json
import random

import pytest

from gbnf_check import accepts
from test_tool_grammar import CASES, FORMS, forced, render, _refusals
from hypnos.engines.chat_format.closing import CallCloser
from hypnos.engines.chat_format.gbnf import GrammarError, compile_gbnf

BOOK = {"type": "function", "function": {"name": "book", "parameters": {
    "type": "object", "properties": {
        "guest": {"type": "string"}, "nights": {"type": "integer"}, "budget": {"type": "number"},
        "room": {"type": "string", "enum": ["single", "double"]},
        "address": {"type": "object", "properties": {
            "street": {"type": "string"}, "zip": {"type": "integer"}},
            "required": ["street", "zip"]},
        "note": {"type": "string"}},
    "required": ["guest", "nights", "budget", "room", "address"]}}}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city"]}}}
TOOLS = [BOOK, WEATHER]
REQUIRED = {"book": BOOK["function"]["parameters"]["required"], "get_weather": ["city"]}
#: The dialects that type a nested object by its schema (the others write any value there).
TYPED_OBJECTS = ("hermes", "json", "llama3", "mistral", "harmony")
SETUPS = [(case, named) for case in CASES for named in (True, False)]


def setup_id(setup) -> str:
    return f"{setup[0]}-{'named' if setup[1] else 'required'}"


def grammar_of(case: str, name: str | None) -> tuple[str, str]:
    d = CASES[case]
    return d.forced_prefix(name), d.grammar(TOOLS, name)


def check_call(case: str, prefix: str, grammar: str, text: str, name: str | None = None):
    """``text`` (everything after the forced opening) is one whole call: llama.cpp's grammar
    accepts it and the parser reads a call to an offered tool with its required keys."""
    assert accepts(grammar, text), f"the grammar refuses {text!r}"
    calls = CASES[case].parse(prefix + text, TOOLS)
    assert len(calls) == 1, text
    call = calls[0]
    assert call.name == (name or call.name) and call.name in REQUIRED
    args = json.loads(call.arguments)
    assert set(REQUIRED[call.name]) <= set(args), (text, args)
    if call.name == "book":
        assert isinstance(args["guest"], str) and isinstance(args["nights"], int)
        assert args["room"] in ("single", "double")
        if case in TYPED_OBJECTS:
            assert set(args["address"]) >= {"street", "zip"}
    return call.name, args


# ------------------------------------------------------------------ the walk

@pytest.mark.parametrize("case", CASES)
def test_the_walk_admits_what_llama_cpp_admits_and_refuses_the_rest(case):
    for form in [f for f in FORMS if f[0] == case]:
        _, name, args, named, style = form
        _, grammar = forced(case, name, named)
        g = compile_gbnf(grammar)
        state = g.advance(g.start, render(case, name, args, named, style))
        assert g.complete(state), form
        assert g.closing(state) == ""
    for why, name, named, text in _refusals(case):
        _, grammar = forced(case, name, named)
        g = compile_gbnf(grammar)
        verdict = g.complete(g.advance(g.start, text))
        assert verdict == accepts(grammar, text), (why, text)


@pytest.mark.parametrize("grammar,texts", [
    ('root ::= "a"{2} [0-9]{1,3} "z"?', ["aa1", "aa123z", "aa1234", "a1", "aa", "aa12z"]),
    ('root ::= ("ab" | "c")+ x\nx ::= . # any one\n', ["abq", "ccabc!", "ab", "abab"]),
    ('root ::= [^a-c\\n] "\\x41" [\\]-]*', ["dA", "dA]-]", "aA", "\nA", "dA-x"]),
    ('root ::= "{" (\n  item ("," item)*\n)? "}"\nitem ::= [a-z]{0,}', ["{}", "{a,bc,}", "{,}",
                                                                        "{A}"]),
])
def test_the_walk_reads_gbnf_as_llama_cpp_does(grammar, texts):
    g = compile_gbnf(grammar)
    for text in texts:
        assert g.complete(g.advance(g.start, text)) == accepts(grammar, text), text
        closing = g.closing(g.advance(g.start, text))
        if closing is not None:
            assert accepts(grammar, text + closing), (text, closing)


@pytest.mark.parametrize("bad", ['root ::= missing', 'root ::= "a', 'root ::= [a-',
                                 'root ::= "a"\nroot ::= "b"', 'main ::= "a"'])
def test_grammars_it_cannot_read_are_refused(bad):
    with pytest.raises(GrammarError):
        compile_gbnf(bad)


# ------------------------------------------------------------------ closings

@pytest.mark.parametrize("setup", SETUPS, ids=setup_id)
def test_every_prefix_of_a_call_closes_to_a_call(setup):
    """Inside a string, between keys, after a key, inside a number or a tag: the closing
    makes a whole call of the same tool, and a whole call needs none."""
    case, named = setup
    name = "get_weather" if named else None
    prefix, grammar = grammar_of(case, name)
    full = CASES[case].render_call({"name": "get_weather", "arguments": {
        "city": "São Paulo", "days": 12, "unit": "celsius"}})
    assert full.startswith(prefix)
    text = full[len(prefix):]
    g = compile_gbnf(grammar)
    state = g.start
    for i in range(len(text) + 1):
        closing = g.closing(state)
        assert closing is not None and g.closing_bytes(state) == len(closing.encode())
        assert check_call(case, prefix, grammar, text[:i] + closing, name)[0] == "get_weather"
        if i < len(text):
            state = g.advance(state, text[i])
    assert g.closing(state) == ""


@pytest.mark.parametrize("case,cut,closing", [
    ("hermes", '{"name": "get_weather", "arguments": {"city": "Par', '"}}\n</tool_call>'),
    ("hermes", '{"name": "book", "arguments": {"guest": "Ann", ',
     '"nights":0,"budget":0,"room":"single","address":{"street":"","zip":0}}}\n</tool_call>'),
    ("hermes", '{"name": "book", "arguments": {"guest": "Ann", "nights": 4',
     ',"budget":0,"room":"single","address":{"street":"","zip":0}}}\n</tool_call>'),
    ("qwen3_coder", "get_weather>\n<parameter=city>\nPar",
     "\n</parameter>\n</function>\n</tool_call>"),
    ("gemma", 'get_weather{city:<|"|>Par', '<|"|>}<tool_call|>'),
    ("lfm", 'book(guest="Ann", nights=', '0, budget=0, room="single", address=0)]'
     "<|tool_call_end|>"),
    ("glm", "get_weather<arg_key>city</arg_key><arg_value>Par",
     "</arg_value></tool_call>"),
])
def test_the_closing_is_the_shortest_end(case, cut, closing):
    """Hand-computed: end the open string or value, the remaining required keys at their
    shortest (empty string, 0, the first enum member, the nested object's own required
    keys), no optional key, then the dialect's close."""
    prefix, grammar = grammar_of(case, None)
    g = compile_gbnf(grammar)
    assert g.closing(g.advance(g.start, cut)) == closing
    check_call(case, prefix, grammar, cut + closing)


@pytest.mark.parametrize("setup", SETUPS, ids=setup_id)
def test_random_walks_over_the_grammar_close_to_a_call(setup):
    """Texts no rendering writes (any spacing, half a number, a nested object cut open):
    wherever a walk over the grammar stops, its closing makes a call."""
    case, named = setup
    name = "book" if named else None
    prefix, grammar = grammar_of(case, name)
    g = compile_gbnf(grammar)
    rng = random.Random(setup_id(setup))
    for _ in range(6):
        text, state = walk(g, rng, rng.randrange(5, 160))
        check_call(case, prefix, grammar, text + g.closing(state), name)


ALPHABET = ('{}[]()<>|="\\:,.-_/ \n\t' + "abcdefghijklmnopqrstuvwxyz0123456789" + "é")


def walk(g, rng: random.Random, steps: int, state=None) -> tuple[str, frozenset]:
    """A random text of up to ``steps`` characters the grammar admits from ``state`` (the
    start), leaning to markup (so it leaves strings and opens keys), and the state after."""
    text, state = "", g.start if state is None else state
    for _ in range(steps):
        options = [(c, s) for c in ALPHABET if (s := g.advance(state, c))]
        if not options:
            break
        marks = [o for o in options if not o[0].isalnum()]
        c, state = rng.choice(marks if marks and rng.random() < 0.4 else options)
        text += c
    return text, state


# ------------------------------------------------------------------ the token budget

class Chunks:
    """A stand-in tokenizer: text cut into pieces of up to ``size`` characters, each piece a
    token id (so every token spells at least one byte, as a real one does)."""

    def __init__(self, size: int = 3):
        self.size = size
        self.pieces: list[bytes] = []

    def __call__(self, text: str) -> list[int]:
        out = []
        for i in range(0, len(text), self.size):
            self.pieces.append(text[i:i + self.size].encode())
            out.append(len(self.pieces) - 1)
        return out


def run(closer: CallCloser, tokens: list[bytes], max_tokens: int, tok: Chunks):
    """Deliver ``tokens`` (the model's) through ``closer`` as the decode loop does, up to
    ``max_tokens``; (text delivered, whether the closer closed the call)."""
    out = b""
    for n, piece in enumerate(tokens):
        if n >= max_tokens:
            break
        closing = closer.offer(piece, n)
        if closing is not None:
            assert n + len(closing) <= max_tokens
            return (out + b"".join(tok.pieces[t] for t in closing)).decode(), True
        out += piece
    return out.decode(), False


def shortest_tokens(case: str, name: str | None, tok: Chunks) -> int:
    g = compile_gbnf(grammar_of(case, name)[1])
    return len(tok(g.closing(g.start)))


@pytest.mark.parametrize("size", [1, 3])
@pytest.mark.parametrize("setup", SETUPS, ids=setup_id)
def test_an_endless_string_ends_as_a_call_at_every_max_tokens(setup, size):
    """The issue's failure: the model keeps writing inside a string with no maxLength (here
    with a character split across two tokens, over and over). From the shortest call's
    length up, every max_tokens ends with a whole call and never half a character, with
    closings of one token a byte (the tightest a tokenizer can be) or fewer; one token less
    than the shortest call and the closer stands back (the old cut at max_tokens)."""
    case, named = setup
    name = "get_weather" if named else None
    prefix, grammar = grammar_of(case, name)
    tok = Chunks(size)
    full = CASES[case].render_call({"name": "get_weather", "arguments": {"city": "QQQ"}})
    opening = full[len(prefix):full.index("QQQ")]
    model = [opening.encode()] + [b"ab", "é".encode()[:1], "é".encode()[1:]] * 200
    least = shortest_tokens(case, name, tok)
    assert CallCloser.start(grammar, tok, least - 1) is None
    for max_tokens in range(least, least + 30):
        closer = CallCloser.start(grammar, tok, max_tokens)
        assert closer is not None
        text, closed = run(closer, model, max_tokens, tok)
        assert closed, max_tokens
        assert check_call(case, prefix, grammar, text, name)[0] == "get_weather"


@pytest.mark.parametrize("setup", SETUPS, ids=setup_id)
def test_a_random_model_always_ends_with_a_whole_call(setup):
    """Tokens of one to five characters from a random walk over the grammar, stopping (its
    end token) only once the call is whole: whatever max_tokens from the shortest call up,
    the answer is a whole call, and the closer only steps in when the model had not
    finished."""
    case, named = setup
    name = "book" if named else None
    prefix, grammar = grammar_of(case, name)
    g = compile_gbnf(grammar)
    tok = Chunks()
    rng = random.Random("model-" + setup_id(setup))
    least = shortest_tokens(case, name, tok)
    for _ in range(8):
        max_tokens = least + rng.randrange(0, 60)
        closer = CallCloser.start(grammar, tok, max_tokens)
        text, state, n = "", g.start, 0
        while n < max_tokens and not (g.complete(state) and rng.random() < 0.5):
            piece, state = walk_piece(g, state, rng)
            if piece is None:
                break
            closing = closer.offer(piece.encode(), n)
            if closing is not None:         # only when the model's token would not fit
                assert n + 1 + len(tok(g.closing(state))) > max_tokens
                assert n + len(closing) <= max_tokens
                text += b"".join(tok.pieces[t] for t in closing).decode()
                break
            text, n = text + piece, n + 1
        check_call(case, prefix, grammar, text, name)


def walk_piece(g, state, rng):
    """The random model's next token: (its text or None when nothing can follow, state)."""
    text, after = walk(g, rng, rng.randrange(1, 6), state)
    return (text or None), after


def test_the_walk_fed_the_pieces_matches_the_walk_fed_the_text():
    """Pieces are decoded as UTF-8 across token boundaries: a character split in two
    tokens is read once whole."""
    _, grammar = grammar_of("hermes", "get_weather")
    tok = Chunks()
    closer = CallCloser.start(grammar, tok, 1000)
    text = '{"name": "get_weather", "arguments": {"city": "Sé'
    raw = text.encode()
    for i, b in enumerate(raw):
        assert closer.offer(bytes([b]), i) is None
    g = compile_gbnf(grammar)
    assert closer.state == g.advance(g.start, text)
