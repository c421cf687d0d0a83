"""What a change of the model pool must not break, checked before the change is made or
saved: the next `hypnos serve` reads the config with the overlay applied and refuses it
whole when `load.validate` finds a problem, so a change that validation would refuse is
refused now (the routes answer 409 naming it).

The two changes that run into it most get their own message: removing a model another one
names as its speculative ``draft``, and an id or alias another model already answers to.
Pure: config values in, a message (or None) out.
"""
from __future__ import annotations

import dataclasses
import re

from hypnos.service.config.load import validate
from hypnos.service.config.schema import Config, ModelConfig

_INDEX = re.compile(r"^models\[(\d+)\]\.?")


def draft_of(m: ModelConfig) -> str | None:
    """The id ``m`` names as its speculative draft model (None: no draft model)."""
    spec = m.speculative
    draft = spec.get("draft") if isinstance(spec, dict) else None
    return draft if isinstance(draft, str) else None


def dependants(models: list[ModelConfig], model_id: str) -> list[str]:
    """The ids of the models that name ``model_id`` as their draft, in pool order."""
    return [m.id for m in models if m.id != model_id and draft_of(m) == model_id]


def owner_of(models: list[ModelConfig], name: str, *, besides: str | None = None,
             ids: bool = True) -> str | None:
    """The id of the model other than ``besides`` that answers to ``name``: by its id
    (unless ``ids`` is False) or one of its aliases."""
    for m in models:
        if m.id != besides and ((ids and m.id == name) or name in m.aliases):
            return m.id
    return None


def removal_conflict(models: list[ModelConfig], model_id: str) -> str | None:
    """Why ``model_id`` cannot leave the pool: the models drafting with it."""
    users = dependants(models, model_id)
    if not users:
        return None
    names = ", ".join(f"'{u}'" for u in users)
    return (f"The model '{model_id}' is the speculative draft of {names}; change their "
            "speculative setting or remove them first")


def name_conflict(models: list[ModelConfig], new: ModelConfig) -> str | None:
    """Why ``new`` cannot join the pool under its names: its id is another model's alias,
    or one of its aliases is another model's id or alias. The entry ``new`` replaces (same
    id) is not another model."""
    owner = owner_of(models, new.id, besides=new.id, ids=False)
    if owner is not None:
        return (f"'{new.id}' is an alias of the model '{owner}'; use another id, or take the "
                f"alias off '{owner}' first")
    for alias in new.aliases:
        owner = owner_of(models, alias, besides=new.id)
        if owner is not None:
            return f"The alias '{alias}' already names the model '{owner}'"
    return None


def start_problems(cfg: Config, models: list[ModelConfig]) -> list[str]:
    """What the start-up validation finds in ``cfg`` with ``models`` as its pool and not in
    ``cfg`` as it is, each naming its model by id (indexes move as the pool changes)."""
    def found(pool: list[ModelConfig]) -> list[str]:
        problems: list[str] = []
        validate(dataclasses.replace(cfg, models=pool), problems)
        return [_INDEX.sub(lambda m: f"the model '{pool[int(m[1])].id}', ", p)
                for p in problems]
    today = set(found(cfg.models))
    return [p for p in found(models) if p not in today]


def change_conflict(cfg: Config, model_id: str, new: ModelConfig | None) -> str | None:
    """Why setting the pool entry ``model_id`` to ``new`` (None: removing it) must be
    refused, or None when the next start would accept the pool it leaves."""
    problem = (removal_conflict(cfg.models, model_id) if new is None
               else name_conflict(cfg.models, new))
    if problem is not None:
        return problem
    after = [m for m in cfg.models if m.id != model_id] + ([new] if new is not None else [])
    problems = start_problems(cfg, after)
    if problems:
        return "The next start would refuse the config after this change: " + "; ".join(
            problems)
    return None
