"""One load of a draft model's weights per process, shared by every target that drafts with it.

Two configured targets naming the same draft model (``speculative = {draft = "<id>"}``) each
build a ``DraftModel`` with its own context (its KV mirrors its target's sequences), but the
draft's ``llama_model`` (its weights) is loaded once: ``acquire`` loads it for the first
target and counts the others in, ``release`` frees it when the last one lets go. The planner
books the shared weights once to match (``planner.sharing``).

Loads are keyed by the file and where its layers go: whether any is offloaded to the GPU
(``n_gpu_layers != 0``) and the extra buffer types setting; a target asking for the same file
elsewhere gets a load of its own. The first load's exact ``n_gpu_layers`` is the one shared
(llama.cpp fixes it at load).

Process-wide on purpose (``DRAFT_WEIGHTS``): a llama.cpp model is a process's native memory
and the engines of one process are its only users. Thread-safe: ``acquire`` blocks on the
load (file I/O, an upload to the GPU) under the registry's lock, so two engines loading at
once still load one copy.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: (resolved file, layers on the GPU at all, extra buffer types).
Key = tuple[str, bool, bool]


@dataclass
class _Held:
    model: object
    users: int


class SharedWeights:
    """Refcounted draft ``llama_model`` handles, by `Key`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[Key, _Held] = {}
        self.loads = 0              # how many times a file was actually loaded (tests, logs)

    @staticmethod
    def key(path: str | Path, gpu_layers: int, extra_bufts: bool) -> Key:
        return str(Path(path).resolve()), gpu_layers != 0, bool(extra_bufts)

    def acquire(self, key: Key, load: Callable[[], object]) -> object:
        """The model for ``key``, loading it with ``load()`` (blocks) when nobody holds it.
        ``load`` returns a null handle (falsy) when llama.cpp refuses the file: nothing is
        then held and that null is returned."""
        with self._lock:
            held = self._held.get(key)
            if held is not None:
                held.users += 1
                return held.model
            model = load()
            if model:
                self._held[key] = _Held(model, 1)
                self.loads += 1
            return model

    def release(self, model: object, free: Callable[[object], None]) -> None:
        """One user of ``model`` lets go; ``free(model)`` (blocks) when it was the last. A
        model this registry does not hold is freed at once."""
        with self._lock:
            for key, held in self._held.items():
                if held.model is model:
                    held.users -= 1
                    if held.users > 0:
                        return
                    del self._held[key]
                    break
            free(model)

    def users(self, path: str | Path) -> int:
        """How many draft contexts hold a load of ``path`` (every key of it)."""
        name = str(Path(path).resolve())
        with self._lock:
            return sum(h.users for k, h in self._held.items() if k[0] == name)


#: The process's draft weights (see the module's contract).
DRAFT_WEIGHTS = SharedWeights()
