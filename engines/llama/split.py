"""A chat model split across RPC workers, run in a child process (`split_worker`).

``SplitChatEngine`` is a `ChatEngine` whose model lives in a spawned child running
`LlamaChatEngine` with ``spec.options["rpc_split"]`` (the workers' layer counts). llama.cpp's
RPC client aborts its process when a worker is lost; here that ends the child: every call in
flight and every later one raises ``WorkerLost`` naming the workers that no longer answer
(probed once the child is gone, when they are free to answer), and ``lost`` says so, which
the scheduler reads to demote the model. No request hangs on a dead child: a reader thread
sees the pipe close and fails the calls waiting on it. Nor on a hung worker (stopped, or gone
without closing its connection, which TCP may not notice for many minutes): the child reports
each second in which its decode loop made progress, and when a call has waited
``spec.options["rpc_stall_secs"]`` with none, the child is killed and the model is lost.

Sessions are forwarded to the child (``export_session`` ...). Not supported on a split model
(it is no ``KVChatEngine``): KV parking across a demotion, keeping the weights in tier 2.
Threading: ``chat`` and the other calls may come from several threads at once;
``load``/``unload`` must not overlap them (the lease).
"""
from __future__ import annotations

import itertools
import logging
import multiprocessing
import queue
import threading
import time

from hypnos.engines import errors
from hypnos.engines.errors import EngineError, WorkerLost
from hypnos.engines.records import ChatRequest, ChatResult, LoadReport, LoadSpec, OnToken

log = logging.getLogger(__name__)

CLOSE_WAIT_S = 10.0
LOST_PROBE_S = 1.0
CANCEL_CHECK_S = 0.1


def rebuild(name: str, message: str, attrs: dict) -> EngineError:
    """The child's engine error as the same class (`split_worker.describe`)."""
    cls = getattr(errors, name, EngineError)
    if not (isinstance(cls, type) and issubclass(cls, EngineError)):
        cls = EngineError
    exc = cls.__new__(cls)
    Exception.__init__(exc, message)
    exc.__dict__.update(attrs)
    return exc


class SplitChatEngine:
    kind = "ggml_llama"

    def __init__(self) -> None:
        self._proc = None
        self._conn = None
        self._send_lock = threading.Lock()
        self._calls: dict[int, queue.Queue] = {}
        self._ids = itertools.count(1)
        self.endpoints: list[str] = []
        self.lost = ""                    # why the model is gone ("" while it serves)
        self.format = None
        self.n_ctx_per_slot = 0
        self.slots = 0
        self.offloaded_layers = 0
        self.device = "cpu"
        self.split_layers: dict[str, int] = {}
        self.stall_s = 120.0
        self._progress_at = 0.0            # monotonic time of the child's last progress
        self._stall_note = ""

    def load(self, spec: LoadSpec) -> LoadReport:
        """Start the child and load the model there. Blocks; raises WorkerLost when the
        child dies while loading (a worker went away), else the child's engine error."""
        self.unload()
        self.endpoints = [e for e, _ in spec.options.get("rpc_split", [])]
        self.stall_s = float(spec.options.get("rpc_stall_secs", 120))
        self.lost = self._stall_note = ""
        from hypnos.engines.llama import split_worker
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=split_worker.main, args=(child,), daemon=True,
                                 name=f"hypnos-split-{spec.model_id}")
        self._proc.start()
        child.close()
        self._conn = parent
        try:
            parent.send(("load", spec))
            message = self._await_load(parent)
        except (EOFError, OSError):
            why = self._why()
            self.unload()
            raise WorkerLost(
                f"{spec.model_id}: loading across the RPC workers failed: {why}") from None
        if message[0] != "loaded":
            self.unload()
            raise rebuild(*message[2:])
        _, report, info = message
        for key, value in info.items():
            setattr(self, key, value)
        threading.Thread(target=self._read, args=(parent,), daemon=True,
                         name=f"hypnos-split-read-{spec.model_id}").start()
        return report

    def _await_load(self, conn):
        """The child's answer to "load"; its progress reports reset the stall bound (a
        hung worker stops the upload: the child is killed, EOFError follows)."""
        progress_at = time.monotonic()
        while True:
            if not conn.poll(CANCEL_CHECK_S):
                if time.monotonic() - progress_at > self.stall_s:
                    self._stalled()
                    progress_at = time.monotonic()      # EOF comes next
                continue
            message = conn.recv()
            if message[0] != "alive":
                return message
            progress_at = time.monotonic()

    def unload(self) -> None:
        """Ask the child to free the model and exit; kill it past ``CLOSE_WAIT_S``."""
        proc, conn, self._proc, self._conn = self._proc, self._conn, None, None
        if proc is None:
            return
        try:
            with self._send_lock:
                conn.send(("close",))
        except (OSError, ValueError):
            pass
        proc.join(CLOSE_WAIT_S)
        if proc.is_alive():
            proc.kill()
            proc.join()
        conn.close()
        if not self.lost:
            self.lost = "the model was unloaded"
        self._fail_all()

    def child_rss(self) -> int:
        """Resident memory of the child process (the model's local part), 0 when none."""
        proc = self._proc
        try:
            with open(f"/proc/{proc.pid}/status", encoding="ascii") as f:
                return next(int(line.split()[1]) * 1024 for line in f
                            if line.startswith("VmRSS:"))
        except (AttributeError, OSError, StopIteration, ValueError):
            return 0

    # ------------------------------------------------------------------ calls

    def chat(self, req: ChatRequest, on_text: OnToken | None,
             cancel: threading.Event) -> ChatResult:
        return self._call("chat", req, on_delta=on_text, cancel=cancel)

    def count_tokens(self, text: str) -> int:
        return self._call("count_tokens", text)

    def prompt_tokens(self, req: ChatRequest) -> int:
        return self._call("prompt_tokens", req)

    @property
    def max_sessions(self) -> int:
        return self.slots

    def export_session(self, slot_or_key: int | str) -> bytes:
        return self._call("export_session", slot_or_key)

    def import_session(self, blob: bytes, key: str, partition: str = "") -> int:
        return self._call("import_session", blob, key, partition)

    def release_session(self, key: str) -> bool:
        return self._call("release_session", key)

    def sessions(self) -> dict[str, int]:
        return self._call("sessions")

    def _call(self, kind: str, *args, on_delta=None, cancel: threading.Event | None = None):
        """Send one call and wait for its answer, forwarding its deltas. Raises WorkerLost
        once the child is gone (checked at least every ``CANCEL_CHECK_S``)."""
        if self.lost or self._conn is None:
            raise WorkerLost(self.lost or "model not loaded")
        call = next(self._ids)
        answers: queue.Queue = queue.Queue()
        self._calls[call] = answers
        cancelled = False
        waiting_since = time.monotonic()
        try:
            self._send((kind, call, *args))
            while True:
                try:
                    message = answers.get(timeout=CANCEL_CHECK_S)
                except queue.Empty:
                    if self.lost:
                        raise WorkerLost(self.lost) from None
                    if time.monotonic() - max(waiting_since, self._progress_at) > self.stall_s:
                        self._stalled()
                        continue
                    if cancel is not None and cancel.is_set() and not cancelled:
                        cancelled = True
                        self._send(("cancel", call))
                    continue
                if message[0] == "delta":
                    if on_delta is not None:
                        on_delta(message[2])
                elif message[0] == "result":
                    return message[2]
                elif message[0] == "error":
                    raise rebuild(*message[2:])
                else:
                    raise WorkerLost(self.lost)
        finally:
            self._calls.pop(call, None)

    def _send(self, message) -> None:
        try:
            with self._send_lock:
                self._conn.send(message)
        except (OSError, ValueError, AttributeError):
            raise WorkerLost(self.lost or self._why()) from None

    def _read(self, conn) -> None:
        """Reader thread: route the child's messages to their calls until the pipe ends."""
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                break
            if message[0] == "alive":
                self._progress_at = time.monotonic()
                continue
            answers = self._calls.get(message[1])
            if answers is not None:
                answers.put(message)
        if conn is self._conn:                  # not an unload: the child died
            self.lost = self._why()
            log.error("%s", self.lost)
            self._fail_all()

    def _stalled(self) -> None:
        """No progress for ``stall_s`` while a call waits: end the child (the reader thread
        then names the workers that do not answer and fails every call)."""
        proc = self._proc
        if proc is not None and proc.is_alive():
            log.error("the split model made no progress for %.0f s: ending it", self.stall_s)
            self._stall_note = f"no progress for {self.stall_s:.0f} s"
            proc.kill()

    def _fail_all(self) -> None:
        for answers in list(self._calls.values()):
            answers.put(("lost",))

    def _why(self) -> str:
        """Which workers no longer answer, probed now that the child let go of them."""
        from hypnos.engines.llama.rpc_probe import probe
        proc = self._proc
        if proc is not None:
            proc.join(CLOSE_WAIT_S)
        gone = [(e, r.error) for e in self.endpoints
                if not (r := probe(e, LOST_PROBE_S)).answers]
        note = f" after {self._stall_note}" if self._stall_note else ""
        if gone:
            return "RPC worker " + "; ".join(f"{e} stopped answering{note} ({why})"
                                             for e, why in gone)
        code = proc.exitcode if proc is not None else None
        if self._stall_note:
            return f"the split model made {self._stall_note} with its workers answering"
        return f"the split model's process ended (exit code {code}) with its workers answering"
