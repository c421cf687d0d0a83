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
    child = _Child(conn)
    if child.load():
        child.serve()


class _Child:
    def __init__(self, conn) -> None:
        from hypnos.engines.llama.engine import LlamaChatEngine
        self.conn, self.engine = conn, LlamaChatEngine()
        self.lock = threading.Lock()
        self.cancels: dict[int, threading.Event] = {}
        self.stop = threading.Event()
        threading.Thread(target=self._heartbeat, daemon=True, name="split-heartbeat").start()

    def send(self, message) -> None:
        with self.lock:
            self.conn.send(message)

    def _heartbeat(self) -> None:
        """("alive", None, mark) each second in which the load or the decode moved."""
        last = None
        while not self.stop.wait(HEARTBEAT_S):
            loop, rpc = self.engine._loop, self.engine._rpc
            mark = (loop.steps if loop is not None else 0,
                    rpc.progress if rpc is not None else 0.0)
            if mark != last:
                last = mark
                try:
                    self.send(("alive", None, mark))
                except OSError:
                    return

    def load(self) -> bool:
        engine = self.engine
        try:
            _, spec = self.conn.recv()
            report = engine.load(spec)
        except Exception as exc:  # noqa: BLE001 - every failure goes back as a message
            self.stop.set()
            self.send(("error", None, *describe(exc)))
            return False
        # llama.cpp counts the workers' layers as offloaded too: the GPU ones are this
        # machine's.
        local_gpu = engine.split_layers.get("local_gpu", 0)
        self.send(("loaded", report, {
            "format": engine.format, "n_ctx_per_slot": engine.n_ctx_per_slot,
            "offloaded_layers": local_gpu, "device": engine.device if local_gpu else "cpu",
            "split_layers": engine.split_layers, "slots": engine.slots}))
        return True

    def run(self, kind: str, call: int, args: tuple) -> None:
        """One call, in a thread of its own; its answer (or error) goes back."""
        try:
            if kind == "chat":
                value = self.engine.chat(args[0], lambda d: self.send(("delta", call, d)),
                                         self.cancels[call])
            elif kind in CALLS:
                value = getattr(self.engine, kind)(*args)
            else:
                raise ValueError(f"unknown call {kind!r}")
            self.send(("result", call, value))
        except Exception as exc:  # noqa: BLE001
            self.send(("error", call, *describe(exc)))
        finally:
            self.cancels.pop(call, None)

    def serve(self) -> None:
        """Read calls until "close" or the parent is gone, then free the model."""
        while True:
            try:
                message = self.conn.recv()
            except EOFError:
                break
            if message[0] == "close":
                break
            if message[0] == "cancel":
                event = self.cancels.get(message[1])
                if event is not None:
                    event.set()
                continue
            self.cancels[message[1]] = threading.Event()
            threading.Thread(target=self.run, args=(message[0], message[1], message[2:]),
                             daemon=True).start()
        self.stop.set()
        for event in list(self.cancels.values()):
            event.set()
        self.engine.unload()
