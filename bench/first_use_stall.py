"""How long the event loop goes unanswered when docling is first used: `hypnos serve` with one
docling model left on disk, /health polled every 20 ms from a thread, the worst wait
recorded in three windows:

  after ready    the seconds right after /ready says yes (the server prepared the docling
                 engine before it, in a worker thread: nothing of it should be left here);
  first PDF      the first conversion once that is done (before the change, the model's
                 load and docling's imports fell here: 0.42-0.59 s on the 2-core machine);
  idle           the same span with nothing running: the baseline, measured in the same run.

    python bench/first_use_stall.py [--window-secs 12]

The server's log says when the preparation ended ("prepared the docling engine in N s").
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from harness import ServerProcess  # noqa: E402

CONFIG = """
[[models]]
id = "docling"
modality = "document_conversion"
engine = "docling"
"""
PREPARED = re.compile(r"prepared the docling engine in ([\d.]+) s")


class Poller:
    """/health every 20 ms; ``worst()`` since the last ``reset()``, in milliseconds."""

    def __init__(self, base: str):
        self.base, self.stop, self.lock = base, False, threading.Lock()
        self.samples: list[float] = []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        client = httpx.Client(timeout=60)
        while not self.stop:
            t0 = time.perf_counter()
            client.get(self.base + "/health")
            with self.lock:
                self.samples.append(time.perf_counter() - t0)
            time.sleep(0.02)

    def reset(self) -> None:
        with self.lock:
            self.samples = []

    def worst(self) -> tuple[float, int, int]:
        with self.lock:
            s = list(self.samples)
        return max(s, default=0.0) * 1000, len(s), sum(x > 0.1 for x in s)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window-secs", type=float, default=12.0)
    args = ap.parse_args()
    from engines.test_documents import make_pdf       # a two-page PDF with a picture
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "hypnos.toml"
        cfg.write_text(CONFIG)
        t0 = time.monotonic()
        srv = ServerProcess(cfg, Path(tmp) / "server.log")
        ready_s = time.monotonic() - t0
        poll = Poller(srv.base)
        try:
            time.sleep(args.window_secs)
            after_ready = poll.worst()
            prepared = PREPARED.search(srv.log_path.read_text())
            poll.reset()
            t1 = time.perf_counter()
            r = httpx.post(srv.base + "/v1/documents/convert", data={"model": "docling"},
                           files={"file": ("a.pdf", make_pdf(), "application/pdf")}, timeout=600)
            convert_s = time.perf_counter() - t1
            first = poll.worst()
            poll.reset()
            time.sleep(min(args.window_secs, 5))
            idle = poll.worst()
        finally:
            poll.stop = True
            srv.stop()
    when = f"in {prepared.group(1)} s, before ready" if prepared else "not (no log line)"
    print(f"ready after {ready_s:.1f} s; docling prepared {when}")
    print(f"{'window':<32}{'worst /health':>15}{'polls':>8}{'> 100 ms':>10}{'x idle':>9}")
    for name, (worst, n, slow) in (("after ready", after_ready),
                                   (f"first PDF ({r.status_code}, {convert_s:.2f} s)", first),
                                   ("idle", idle)):
        print(f"{name:<32}{worst:>12.0f} ms{n:>8}{slow:>10}{worst / max(idle[0], 1e-3):>9.1f}")
    return 0 if r.status_code == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
