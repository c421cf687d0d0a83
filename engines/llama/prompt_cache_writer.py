"""The prompt cache's writer thread: every new entry is written to the folder in the background
(write-behind), at Linux's lowest priority, so no compute thread waits for it
(`compute_threads.in_background`). ``flush`` waits for the writes put so far; ``close`` stops
the thread. A mixin over `PromptCache`'s lock, entries, folder, write queue and trimming (see
prompt_cache.py); every method takes the cache's lock where it touches them.
"""
from __future__ import annotations

import logging
import os
import queue
import threading
import time

from hypnos.engines.llama import prompt_cache_file as files
from hypnos.engines.llama.compute_threads import in_background
from hypnos.engines.llama.prompt_cache_entries import Entry
from hypnos.engines.llama.prompt_cache_file import FileHeader

log = logging.getLogger("hypnos.engines.llama.prompt_cache")


class WriterMixin:
    """The write-behind half of `PromptCache` (see the module)."""

    def _start_writer_locked(self) -> None:
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_loop, name="prompt-cache-writer",
                                            daemon=True)
            self._writer.start()

    def _write_loop(self) -> None:
        in_background()                 # never preempt a compute thread (compute_threads)
        while True:
            try:
                entry = self._writes.get(timeout=60)
            except queue.Empty:
                with self.lock:
                    self._trim_locked()
                continue
            if entry is None:
                return
            try:
                self._write(entry)
            except OSError as exc:
                log.warning("prompt cache: could not write an entry (%s)", exc)
                with self.lock:
                    if entry.spill:
                        self._remove_locked(entry)
            finally:
                with self.lock:
                    self._pending -= 1
                    self._trim_locked()
                    self._idle.notify_all()

    def _write(self, entry: Entry) -> None:
        with self.lock:
            state = entry.state
            if entry not in self.entries or state is None or self.folder is None:
                return
            path = self.folder / f"{os.urandom(12).hex()}{files.SUFFIX}"
            header = FileHeader(entry.identity, entry.model, entry.partition, entry.session,
                                entry.tokens, entry.created, entry.last_used)
        files.write_file(path, files.encode(header, state, entry.checkpoints))
        with self.lock:
            if entry not in self.entries:      # dropped meanwhile (a released session)
                path.unlink(missing_ok=True)
                return
            entry.path = path
            if entry.spill:
                entry.state, entry.spill = None, False

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every entry put so far is on disk (or failed); False on timeout."""
        end = time.monotonic() + timeout
        with self.lock:
            while self._pending:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
            return True

    def close(self, timeout: float = 10.0) -> None:
        """Finish the writes under way (up to ``timeout``) and stop the writer."""
        self.flush(timeout)
        with self.lock:
            self._closed = True
            writer = self._writer
        if writer is not None:
            self._writes.put(None)
            writer.join(timeout)
