"""Pool integrity, the pure parts: a change of the pool that the next start would refuse is
named before it is made (issue #35: removing a draft target, an id that is an alias), the
files /api/delete may take (never a path holding or inside another model's), one pull per
id at a time, and an Ollama ``format`` the grammar cannot express refused, not loosened."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hypnos.engines.chat_format.grammar import (InexpressibleSchema, response_grammar,
                                                schema_grammar)
from hypnos.service.config.load import ConfigError, load_config, overlay_path, parse_model_block
from hypnos.service.config.overlay import overlay_text
from hypnos.service.config.pool_rules import (change_conflict, dependants, name_conflict,
                                              removal_conflict)
from hypnos.service.errors import InvalidRequest
from hypnos.service.lifecycle.catalog_pool import owned_files
from hypnos.service.scheduling.turns import Turns
from hypnos.service.wire.ollama import chat_body, format_grammar

POOL = """
[[models]]
id = "{id}"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "{id}.gguf"
{extra}
"""
# "big" drafts with "small"; "small" answers to "gpt-5" too.
CONFIG = (POOL.format(id="small", extra='aliases = ["gpt-5"]')
          + POOL.format(id="big", extra='speculative = { draft = "small" }')
          + POOL.format(id="solo", extra=""))
NOT_EXPRESSIBLE = {"type": "object", "properties": {"a": {"not": {"type": "string"}}}}


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "hypnos.toml"
    path.write_text(CONFIG)
    return path


def block(model_id: str, extra: str = ""):
    return parse_model_block(POOL.format(id=model_id, extra=extra))


def test_removing_a_draft_target_names_the_model_drafting_with_it(config_file):
    cfg = load_config(config_file, env={})
    assert dependants(cfg.models, "small") == ["big"]
    problem = change_conflict(cfg, "small", None)
    assert problem == removal_conflict(cfg.models, "small")
    assert problem is not None and "'big'" in problem and "draft" in problem
    assert change_conflict(cfg, "big", None) is None        # nothing drafts with big
    assert change_conflict(cfg, "solo", None) is None


def test_an_id_that_is_an_alias_names_the_model_that_owns_it(config_file):
    cfg = load_config(config_file, env={})
    problem = change_conflict(cfg, "gpt-5", block("gpt-5"))
    assert problem is not None and "alias" in problem and "'small'" in problem
    taken = name_conflict(cfg.models, block("new", 'aliases = ["solo"]'))
    assert taken is not None and "'solo'" in taken
    # A replacement keeps its own aliases; a new name is free.
    assert change_conflict(cfg, "small", block("small", 'aliases = ["gpt-5"]')) is None
    assert change_conflict(cfg, "new", block("new", 'aliases = ["gpt-6"]')) is None


def test_any_rule_of_the_start_up_validation_is_checked_by_model_id(config_file):
    """A replacement drafting with itself passes its own block's checks, but not the pool's:
    the message names the model by id, not by an index that moves."""
    cfg = load_config(config_file, env={})
    problem = change_conflict(cfg, "solo", block("solo", 'speculative = { draft = "solo" }'))
    assert problem is not None and "the model 'solo'" in problem and "models[" not in problem


def test_what_the_check_lets_through_the_next_start_loads(config_file):
    """The overlay a permitted change writes is one `load_config` accepts; the refused one
    would not have loaded (the bug: the server refused its own saved config)."""
    cfg = load_config(config_file, env={})
    overlay = overlay_path(config_file)
    assert change_conflict(cfg, "big", None) is None
    overlay.write_text(overlay_text(None, "big", None))
    assert [m.id for m in load_config(config_file, env={}).models] == ["small", "solo"]
    overlay.write_text(overlay_text(None, "small", None))     # what the 409 prevents
    with pytest.raises(ConfigError, match="draft"):
        load_config(config_file, env={})


def test_delete_takes_no_path_holding_or_inside_another_models_file():
    root = Path("/m")
    others = [Path("/m/pack/a.gguf"), Path("/m/shared.gguf")]
    mine = [Path("/m/pack"), Path("/m/pack/a.gguf/x"), Path("/m/shared.gguf"),
            Path("/m/mine.gguf"), Path("/m/mine.gguf"), Path("/m"), Path("/elsewhere/b.gguf"),
            Path("/m/packed.gguf")]
    assert owned_files(mine, others, root) == [Path("/m/mine.gguf"), Path("/m/packed.gguf")]
    assert owned_files([Path("/m/pack")], [], root) == [Path("/m/pack")]


def test_one_turn_per_key_and_nothing_kept_after():
    async def run() -> list[str]:
        turns, log = Turns(), []

        async def pull(name: str, key: str) -> None:
            async with turns.turn(key):
                log.append(f"{name} in")
                await asyncio.sleep(0.01)
                log.append(f"{name} out")
        await asyncio.gather(pull("first", "k"), pull("second", "k"), pull("other", "j"))
        assert not turns._locks and not turns._users
        return log
    log = asyncio.run(run())
    assert log.index("first out") < log.index("second in")     # same key: one at a time
    assert log.index("other in") < log.index("first out")      # another key: no wait


def test_an_inexpressible_format_is_a_400_naming_format():
    with pytest.raises(InexpressibleSchema):
        schema_grammar(NOT_EXPRESSIBLE)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(InvalidRequest) as caught:
        chat_body({**body, "format": NOT_EXPRESSIBLE})
    assert caught.value.param == "format" and "'format'" in caught.value.message
    with pytest.raises(InvalidRequest):
        format_grammar(NOT_EXPRESSIBLE)
    # What the grammar holds still passes, and the OpenAI route's report stays as it was.
    ok = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert chat_body({**body, "format": ok})[1]["response_format"]["type"] == "json_schema"
    assert format_grammar(ok) and format_grammar("json") and format_grammar(None) is None
    assert response_grammar({"type": "json_schema", "json_schema": {
        "schema": NOT_EXPRESSIBLE}})[1] == "schema_downgraded"
