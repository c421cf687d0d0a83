"""The child process that owns a chat model split across RPC workers (see `split`).

llama.cpp's RPC client ends the process (``GGML_ABORT``) when a worker stops answering or
cannot be reached. In this child that ends one model, and the server reports it, instead of
the server's death.

Protocol over one ``multiprocessing`` pipe (every message a tuple):
  parent -> ("load", LoadSpec)      child -> ("loaded", LoadReport, info) | ("error", None, *err)
  parent -> ("chat", id, ChatRequest) | (method, id, *args) for a method in ``CALLS``
  child  -> ("delta", id, ChatDelta)... then ("result", id, value) | ("error", id, *err)
  child  -> ("alive", None, mark)   each second the load or the decode loop made progress
                                    (tensors uploaded, llama_decode calls returned), so the
                                    parent can tell a slow load or request from a hung worker
  parent -> ("cancel", id)          the call stops at its next token
  parent -> ("close",)              the child frees the model and exits
``err`` is (class name in ``engines.errors``, message, attributes), rebuilt by `split.rebuild`.
Calls run in threads of their own (one per call; the engine queues those beyond its slots).
"""
from __future__ import annotations

import os
import threading

HEARTBEAT_S = 1.0
# The engine methods the parent may call besides ``chat`` (blocking, any thread).
CALLS = frozenset({"count_tokens", "prompt_tokens", "export_session", "import_session",
                   "release_session", "sessions"})


def describe(exc: BaseException) -> tuple[str, str, dict]:
    from hypnos.engines import errors
    name = type(exc).__name__ if isinstance(exc, errors.EngineError) else "EngineError"
    attrs = {k: v for k, v in vars(exc).items() if isinstance(v, (int, str, float, type(None)))}
    return name, str(exc) or type(exc).__name__, attrs


def main(conn) -> None:
    """Entry point of the child (spawned: imports nothing of the parent's state)."""
    # ggml's abort otherwise runs gdb on this process for a backtrace (seconds, pages of
    # text): the one line saying why is what the log needs.
    os.environ.setdefault("GGML_NO_BACKTRACE", "1")
    from hypnos.engines.llama.engine import LlamaChatEngine
    engine = LlamaChatEngine()
    lock = threading.Lock()
    cancels: dict[int, threading.Event] = {}
    stop = threading.Event()

    def send(message) -> None:
        with lock:
            conn.send(message)

    def progress() -> tuple[int, float]:
        loop, rpc = engine._loop, engine._rpc
        return (loop.steps if loop is not None else 0, rpc.progress if rpc is not None else 0.0)

    def heartbeat() -> None:
        last = None
        while not stop.wait(HEARTBEAT_S):
            mark = progress()
            if mark != last:
                last = mark
                try:
                    send(("alive", None, mark))
                except OSError:
                    return

    threading.Thread(target=heartbeat, daemon=True, name="split-heartbeat").start()
    try:
        _, spec = conn.recv()
        report = engine.load(spec)
    except Exception as exc:  # noqa: BLE001 - every failure goes back as a message
        stop.set()
        send(("error", None, *describe(exc)))
        return
    # llama.cpp counts the workers' layers as offloaded too: the GPU ones are this machine's.
    local_gpu = engine.split_layers.get("local_gpu", 0)
    send(("loaded", report, {
        "format": engine.format, "n_ctx_per_slot": engine.n_ctx_per_slot,
        "offloaded_layers": local_gpu, "device": engine.device if local_gpu else "cpu",
        "split_layers": engine.split_layers, "slots": engine.slots}))

    def run(kind: str, call: int, args: tuple) -> None:
        try:
            if kind == "chat":
                value = engine.chat(args[0], lambda d: send(("delta", call, d)), cancels[call])
            elif kind in CALLS:
                value = getattr(engine, kind)(*args)
            else:
                raise ValueError(f"unknown call {kind!r}")
            send(("result", call, value))
        except Exception as exc:  # noqa: BLE001
            send(("error", call, *describe(exc)))
        finally:
            cancels.pop(call, None)

    while True:
        try:
            message = conn.recv()
        except EOFError:
            break
        if message[0] == "close":
            break
        if message[0] == "cancel":
            event = cancels.get(message[1])
            if event is not None:
                event.set()
            continue
        cancels[message[1]] = threading.Event()
        threading.Thread(target=run, args=(message[0], message[1], message[2:]),
                         daemon=True).start()
    stop.set()
    for event in list(cancels.values()):
        event.set()
    engine.unload()
