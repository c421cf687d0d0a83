"""The scoring of bench/tool_calls.py on hand-made answers: the call validator (JSON that the
tool's schema admits), the argument predicates, the four columns a case counts in, and the
fixed case set itself (50 cases, every expected call possible under its tools' schemas)."""
import json

import pytest

from dataclasses import asdict

from hypnos.bench.tool_scoring import (Case, answer_of, call_problem, holds, load_cases, lookup,
                                       rates, ratio, score)

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {
        "timezone": {"type": "string"}}, "required": ["timezone"]}}}
PARIS = Case("w", "choice", [WEATHER, TIME], "Weather in Paris, in celsius?", "get_weather",
             {"city": {"contains": "paris"}, "unit": {"in": ["celsius", "c"]}})
HAIKU = Case("h", "none", [WEATHER], "Write a haiku about rain.", None, {})


def answer(content=None, *calls):
    """A chat completion body: ``calls`` are (name, arguments) pairs, arguments a dict (sent
    as its JSON) or a raw string."""
    tool_calls = [{"id": f"call_{i}", "type": "function", "function": {
        "name": n, "arguments": a if isinstance(a, str) else json.dumps(a)}}
        for i, (n, a) in enumerate(calls)]
    message = {"role": "assistant", "content": content, **({"tool_calls": tool_calls}
                                                           if tool_calls else {})}
    return {"choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if calls else "stop"}]}


def columns(outcome):
    return outcome.valid, outcome.right_tool, outcome.right_args, outcome.no_tool


def test_a_right_call_counts_in_every_call_column():
    o = score(PARIS, answer("", ("get_weather", {"city": "Paris, France", "unit": "celsius"})))
    assert columns(o) == (True, True, True, None) and o.problem is None


@pytest.mark.parametrize("args, problem", [
    ({"city": "Lyon", "unit": "celsius"}, "city"),           # a predicate fails
    ({"city": "Paris"}, "unit missing"),                     # a predicated key is absent
    ({"city": "Paris", "unit": "kelvin"}, "schema"),         # the enum refuses it
    ({"unit": "celsius"}, "schema"),                         # a required key is absent
    ({"city": 7, "unit": "celsius"}, "schema"),              # a wrong type
])
def test_wrong_arguments_are_the_right_tool_without_the_right_arguments(args, problem):
    o = score(PARIS, answer(None, ("get_weather", args)))
    assert o.right_tool and not o.right_args and problem in o.problem
    assert o.valid == (not problem.startswith("schema"))


@pytest.mark.parametrize("arguments", ['{"city": "Paris"', '["Paris"]', "", "city=Paris"])
def test_arguments_that_are_no_json_object_are_not_a_valid_call(arguments):
    o = score(PARIS, answer(None, ("get_weather", arguments)))
    assert columns(o) == (False, True, False, None)


def test_the_other_tool_or_an_unknown_one():
    other = score(PARIS, answer(None, ("get_time", {"timezone": "Europe/Paris"})))
    assert columns(other) == (True, False, False, None)
    assert "expected get_weather" in other.problem
    unknown = score(PARIS, answer(None, ("weather", {"city": "Paris"})))
    assert columns(unknown) == (False, False, False, None) and "unknown tool" in unknown.problem


def test_only_the_first_call_counts():
    o = score(PARIS, answer(None, ("get_time", {"timezone": "CET"}),
                            ("get_weather", {"city": "Paris", "unit": "celsius"})))
    assert columns(o) == (True, False, False, None) and o.called == "get_time"


@pytest.mark.parametrize("text", [
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
    '```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris"\n  }\n}\n```',
    'Sure: {"name": "get_time", "parameters": {"timezone": "CET"}}',
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}\n</tool_call>'])
def test_a_call_written_in_the_text_is_no_call_and_no_answer(text):
    o = score(PARIS, answer(text))
    assert columns(o) == (False, False, False, None) and o.text_call is True
    assert o.problem == "a call in the text"
    none = score(HAIKU, answer(text))
    assert none.no_tool is False and none.problem == "a call in the text"


def test_text_about_names_and_arguments_is_an_answer():
    text = 'Pass "name": the city, then the arguments.'
    assert score(HAIKU, answer(text)).no_tool is True
    o = score(PARIS, answer(text))
    assert o.text_call is False and o.problem == "no call"


def test_no_tool_cases_count_a_text_answer_only():
    assert columns(score(HAIKU, answer("Grey drops on the roof"))) == (None, None, None, True)
    called = score(HAIKU, answer("", ("get_weather", {"city": "London"})))
    assert called.no_tool is False and called.problem == "called a tool"
    assert score(HAIKU, answer("  ")).no_tool is False


def test_a_failed_request_is_a_miss_in_the_columns_its_case_counts_in():
    assert columns(score(PARIS, None, "HTTP 500")) == (False, False, False, None)
    o = score(HAIKU, None, "HTTP 400: bad")
    assert columns(o) == (None, None, None, False) and o.problem.endswith("HTTP 400: bad")


@pytest.mark.parametrize("case, response", [
    (PARIS, answer("", ("get_weather", {"city": "Paris", "unit": "celsius"}))),
    (PARIS, answer(None, ("get_weather", '{"city": "Pa'))),
    (PARIS, answer('{"name": "get_weather", "arguments": {}}')),
    (HAIKU, answer("Grey drops")), (HAIKU, answer(None)), (HAIKU, None), (PARIS, None)])
def test_a_saved_outcome_scores_again_the_same(case, response):
    """--rescore reads outcomes back from a run's JSON and scores them again."""
    first = score(case, response, "HTTP 503: busy")
    assert score(case, *answer_of(asdict(first))) == first


@pytest.mark.parametrize("predicate, value, expected", [
    ({"contains": "paris"}, "PARIS, FR", True),
    ({"contains": ["nyc", "new york"]}, "New York City", True),
    ({"contains": "paris"}, ["Paris"], False),
    ({"in": ["usd"]}, " USD ", True),
    ({"in": ["usd"]}, "US dollars", False),
    ({"eq": 3}, 3.0, True),
    ({"eq": 3}, "3", False),
    ({"eq": 1}, True, False),
    ({"eq": True}, True, True),
    ({"eq": True}, 1, False),
    ({"has": ["ops", "security"]}, ["Ops", "security-team"], True),
    ({"has": ["ops", "security"]}, ["ops"], False),
    ({"len": 2}, [1, 2], True),
    ({"len": 2}, "ab", False),
])
def test_predicates(predicate, value, expected):
    assert holds(predicate, value) is expected


def test_an_unknown_predicate_is_an_error():
    with pytest.raises(ValueError, match="unknown predicate"):
        holds({"like": "x"}, "x")


def test_dotted_paths_index_objects_and_lists():
    args = {"items": [{"sku": "A"}, {"sku": "B"}], "customer": {"name": "Jane"}}
    assert lookup(args, "items.1.sku") == (True, "B")
    assert lookup(args, "customer.name") == (True, "Jane")
    assert lookup(args, "items.2.sku") == (False, None)
    assert lookup(args, "customer.email") == (False, None)


def test_rates_count_each_column_over_the_cases_it_applies_to():
    outcomes = [score(PARIS, answer("", ("get_weather", {"city": "Paris", "unit": "celsius"}))),
                score(PARIS, answer("sunny")),
                score(HAIKU, answer("rain haiku"))]
    assert rates(outcomes) == {"valid": (1, 2), "right_tool": (1, 2), "right_args": (1, 2),
                               "no_tool": (1, 1), "text_call": (0, 2)}


@pytest.mark.parametrize("ours, theirs, printed", [
    ((3, 4), (3, 6), "1.50"), ((0, 4), (0, 4), "-"), ((1, 4), (0, 4), "inf"),
    ((0, 0), (1, 2), "-"), ((0, 4), (2, 4), "0.00")])
def test_ratio(ours, theirs, printed):
    assert ratio(ours, theirs) == printed


def test_the_case_set():
    cases = load_cases()
    kinds = [c.kind for c in cases]
    assert len(cases) == 50 and len({c.id for c in cases}) == 50
    assert {k: kinds.count(k) for k in set(kinds)} == {
        "single": 10, "choice": 12, "multi": 10, "nested": 8, "none": 10}
    for c in cases:
        names = [t["function"]["name"] for t in c.tools]
        assert (c.expect is None) == (c.kind == "none") == (not c.args), c.id
        assert c.expect is None or c.expect in names, c.id
        if c.kind == "choice":
            assert 2 <= len(names) <= 4, c.id
        for t in c.tools:                        # every schema is one the validator can read
            assert call_problem({"name": t["function"]["name"], "arguments": "[]"},
                                c.tools) == "arguments are not a JSON object"


def schema_at(schema, path):
    """The sub-schema a dotted argument path falls in (KeyError: no such property)."""
    for part in path.split("."):
        schema = schema["items"] if part.isdigit() else schema["properties"][part]
    return schema


def test_every_predicate_names_a_property_of_its_tool_and_an_enum_value_it_admits():
    for c in load_cases():
        if c.expect is None:
            continue
        params = next(t["function"]["parameters"] for t in c.tools
                      if t["function"]["name"] == c.expect)
        for path, predicate in c.args.items():
            sub = schema_at(params, path)
            if "in" in predicate and "enum" in sub:
                assert set(predicate["in"]) & set(sub["enum"]), (c.id, path)
