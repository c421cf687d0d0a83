"""``hypnos serve --watch-config``: a changed config file is applied to the model pool the way
the pool routes would (spec section 6, the same startup checks; replacements and removals
drain), and a bad edit is refused and logged with its dotted keys while the old pool keeps
serving. Only ``[[models]]`` changes apply at run time; the other sections are read at the
next start (logged when they differ).

The file is polled (mtime and size, every `POLL_SECS`): no inotify dependency, and an editor
that replaces the file by renaming is seen like one that writes in place.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from pathlib import Path

from hypnos.service.config.load import ConfigError, load_config
from hypnos.service.config.schema import Config
from hypnos.service.scheduling.model_checks import startup_checks
from hypnos.service.state import state

log = logging.getLogger("hypnos.watch")
POLL_SECS = 1.0
DRAIN_SECS = 120.0


def _stamp(path: Path):
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


@dataclasses.dataclass
class PoolDiff:
    added: list[str]
    replaced: list[str]
    removed: list[str]

    def __bool__(self) -> bool:
        return bool(self.added or self.replaced or self.removed)


def diff_models(old: Config, new: Config) -> PoolDiff:
    before = {m.id: m for m in old.models}
    after = {m.id: m for m in new.models}
    return PoolDiff(added=[i for i in after if i not in before],
                    replaced=[i for i in after if i in before and after[i] != before[i]],
                    removed=[i for i in before if i not in after])


async def apply_config_file(app, path: Path) -> PoolDiff | None:
    """Read ``path`` again and apply its model changes; None (and a logged warning naming
    every problem) when the edit is refused, in which case nothing changes."""
    current: Config = state(app).config
    try:
        new = await asyncio.to_thread(load_config, path)
    except ConfigError as exc:
        log.warning("config change refused, the old pool keeps serving: %s",
                    "; ".join(exc.problems))
        return None
    new.models_dir = current.models_dir          # as resolved at start (HYPNOS_MODELS_DIR)
    diff = diff_models(current, new)
    catalog = state(app).catalog
    tested = catalog.tested_architectures if catalog is not None else None
    states, problems = {}, []
    for i, m in enumerate(new.models):
        if m.id in diff.added or m.id in diff.replaced:
            st, found = await asyncio.to_thread(startup_checks, current, m, tested,
                                                f"{path.name}: models[{i}]")
            states[m.id] = st
            problems += found
    if problems:
        log.warning("config change refused, the old pool keeps serving: %s",
                    "; ".join(problems))
        return None
    sched = state(app).scheduler
    for model_id in diff.replaced + diff.removed:
        await sched.pool.swap(model_id, states.get(model_id), DRAIN_SECS)
    for model_id in diff.added:
        sched.add(states[model_id])
    current.models = new.models
    others = [name for name in ("server", "limits", "hardware")
              if getattr(new, name) != getattr(current, name)]
    if others:
        log.info("config: changes to [%s] apply at the next start", "], [".join(others))
    if diff:
        log.info("config applied: added %s, replaced %s, removed %s",
                 diff.added, diff.replaced, diff.removed)
    return diff


async def watch_config(app, path: Path) -> None:
    """Runs until cancelled. A refused or failed change is logged; the watch goes on."""
    seen = _stamp(path)
    while True:
        await asyncio.sleep(POLL_SECS)
        stamp = _stamp(path)
        if stamp == seen or stamp is None:
            continue
        seen = stamp
        try:
            await apply_config_file(app, path)
        except Exception as exc:  # noqa: BLE001 - e.g. 429 past drain_secs: keep watching
            log.warning("config change not fully applied: %s", exc)


def install_config_watch(app, path: Path) -> None:
    @app.after_server_start
    async def _start_watch(app):
        state(app).config_watch = asyncio.create_task(watch_config(app, Path(os.fspath(path))))

    @app.before_server_stop
    async def _stop_watch(app):
        task = state(app).config_watch
        if task is not None:
            task.cancel()
