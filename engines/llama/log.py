"""ggml's log lines (llama.cpp, libmtmd) sent to ``logging`` instead of stderr."""
from __future__ import annotations

import contextlib
import ctypes
import logging
import re

# ggml_log_level (ggml.h: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5) -> logging.
# llama.cpp's INFO is ~150 lines per load, so it goes to DEBUG. (llama-cpp-python's own
# _logger.py reads these numbers off by one.)
_LEVELS = {0: logging.DEBUG, 1: logging.DEBUG, 2: logging.DEBUG, 3: logging.WARNING,
           4: logging.ERROR}
_CONT = 5
# The C libraries keep one process-wide callback each; it must outlive every model, so the
# ctypes objects live here, one per logger name.
_callbacks: dict[str, object] = {}
# name -> the lines being captured for ``capture`` (every level, before logging filters).
_captures: dict[str, list[str]] = {}
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")


@contextlib.contextmanager
def capture(name: str):
    """Collect the lines the library logs under ``name`` while the block runs (every level,
    whatever the logging configuration). Not nested per name; the caller serializes (the
    scheduler loads one model at a time)."""
    lines: list[str] = []
    _captures[name] = lines
    try:
        yield lines
    finally:
        _captures.pop(name, None)


def offloaded_layers(lines: list[str]) -> int:
    """Layers llama.cpp reports on a GPU after a model load ("load_tensors: offloaded N/M
    layers to GPU"); 0 when it printed none (it prints none when no GPU backend is usable)."""
    for line in lines:
        m = _OFFLOADED.search(line)
        if m:
            return int(m.group(1))
    return 0


def route_once(ll, name: str, set_callback) -> None:
    """Install, once per ``name``, a callback that forwards every line to
    ``logging.getLogger(name)``; ``set_callback(callback, user_data)`` is the library's
    setter (``llama_log_set``, ``mtmd_helper_log_set``). ``ll`` is ``llama_cpp.llama_cpp``."""
    if name in _callbacks:
        return
    logger = logging.getLogger(name)
    last = [logging.DEBUG]

    def forward(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
        if level != _CONT:                  # a continuation keeps the previous level
            last[0] = _LEVELS.get(level, logging.DEBUG)
        message = text.decode("utf-8", "replace").rstrip()
        captured = _captures.get(name)
        if captured is not None and message:
            captured.append(message)
        if message:
            logger.log(last[0], "%s", message)

    _callbacks[name] = ll.llama_log_callback(forward)
    set_callback(_callbacks[name], ctypes.c_void_p(0))
