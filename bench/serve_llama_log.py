"""`hypnos serve`, with llama.cpp's own log lines in the server's log.

The engine forwards llama.cpp's lines to the ``hypnos.engines.llama.cpp`` logger at DEBUG
(``engines/llama/log.py``), below the INFO that `hypnos serve` logs at, so its log does not
say which batch sizes, flash attention or KV types llama.cpp built the context with. This
runs the same command with that one logger at DEBUG (some 1,800 lines per model load, most
of them the graph's input tensors; a request logs none), so ``llama_server.py
--default-model`` can read them rather than assume them. Everything else is `hypnos serve`
as is, except that it is not the ``hypnos`` command, so it does not re-execute itself for
transparent huge pages (``cli/malloc_thp.py``): the caller sets ``GLIBC_TUNABLES`` as that
re-execution would.

    python bench/serve_llama_log.py serve --config PATH --port N
"""
from __future__ import annotations

import logging
import sys

from hypnos.cli.main import main

if __name__ == "__main__":
    logging.getLogger("hypnos.engines.llama.cpp").setLevel(logging.DEBUG)
    sys.argv[0] = "hypnos"
    main()
