"""llama.cpp engines (kind ``ggml_llama``) over llama-cpp-python's low-level bindings.

- ``engine``: ``LlamaChatEngine`` (lifecycle, chat, KV parking); ``sessions``: its session
  export / import; ``prompt``: building the prompt; ``reader``: reading the answer.
- ``decode_loop``: the decode thread; ``slots``: its slots, jobs and queue; ``sampling``:
  sampler chains, thinking budget, loop detection; ``state``: KV state and session blobs.
- ``mtmd``: the vision / audio projector (libmtmd); ``embed``: ``LlamaEmbedder``.
- ``cpu``: what the build may do on this CPU; ``log``: ggml's log lines into ``logging``.

Importing this package (or any module but ``embed``'s and ``engine``'s ``load``) imports no
llama_cpp: the library is imported when a model loads.
"""
