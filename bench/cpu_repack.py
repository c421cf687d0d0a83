"""Whether a CPU with AMX loses by keeping its weights out of llama.cpp's repacked layouts.

On a CPU with AMX the engine loads with ``use_extra_bufts`` off (``engines/llama/cpu.py``:
the AMX matmul of this llama.cpp dies on such hosts). That switch also turns off the CPU's
other extra buffer type, ``CPU_REPACK``: matrices of some types (x86 with AVX2: Q4_0, Q4_K,
IQ4_NL, MXFP4 with a row count divisible by 8; Q2_K with AVX-512) interleaved 8 rows at a
time for the repacked GEMV/GEMM kernels. This bench loads one model twice in one process,
plainly and with exactly those matrices placed in ``CPU_REPACK`` (``tensor_buft_overrides``,
AMX never chosen), and times on each (interleaved rounds, medians): a prompt's prefill in
512-token batches, and one ``llama_decode`` of b positions (b = 1: a decode step; b > 1: a
step verifying b - 1 drafted tokens) after 512 tokens of context.

    python bench/cpu_repack.py [--weights PATH] [--threads N] [--prefill 2048]
                               [--sizes 1,2,3,4,5,8] [--rounds 15]

Default weights: the lineup's chat model (Qwen2.5-Coder-0.5B, where only its 12 ``ffn_down``
matrices are Q4_K); ``--weights models/qwen2.5-coder-1.5b/...`` has most of its weight in
Q4_K. Prints the repacked share and each figure's ratio repacked / plain.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
from pathlib import Path

from hypnos.bench.spec_step_costs import decode_sequence, default_weights
from hypnos.engines.llama.cpu import cpu_flags

#: Quantisation types llama.cpp 0.3.36 repacks on x86, and the CPU feature each needs.
REPACKED_X86 = {"Q4_0": "avx2", "Q4_K": "avx2", "IQ4_NL": "avx2", "MXFP4": "avx2",
                "Q2_K": "avx512f"}
CTX = 4096


def repacked(tensors, flags: set[str]) -> tuple[list[str], int, int]:
    """Of ``tensors`` ((name, type name, shape in ggml's order, bytes) each), the names of
    the layer matrices the repack takes on a CPU with ``flags``, their bytes, and all layer
    matrices' bytes. A matrix outside the layers (the token embedding, read by rows) is
    never repacked."""
    names, taken, total = [], 0, 0
    for name, kind, shape, size in tensors:
        if not name.startswith("blk.") or len(shape) != 2:
            continue
        total += size
        need = REPACKED_X86.get(kind)
        if need in flags and shape[1] % 8 == 0:
            names.append(name)
            taken += size
    return names, taken, total


def gguf_tensors(weights: Path) -> list[tuple[str, str, tuple[int, ...], int]]:
    from gguf import GGUFReader
    return [(t.name, t.tensor_type.name, tuple(int(n) for n in t.shape), int(t.n_bytes))
            for t in GGUFReader(str(weights)).tensors]


class _Override(ctypes.Structure):
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


def repack_buffer_type():
    """llama.cpp's ``CPU_REPACK`` buffer type (a pointer), from the CPU backend's extra
    buffer types; None when this build has none."""
    from hypnos.engines.llama.rpc import ggml_library
    ggml = ggml_library()
    ggml.ggml_backend_buft_name.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_buft_name.restype = ctypes.c_char_p
    reg = ggml.ggml_backend_reg_by_name(b"CPU")
    cpu = ggml.ggml_backend_reg_dev_get(reg, 0)
    address = ggml.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_dev_get_extra_bufts")
    if not address:
        return None
    extra = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)(address)(cpu)
    i = 0
    while extra[i]:
        if ggml.ggml_backend_buft_name(extra[i]) == b"CPU_REPACK":
            return extra[i]
        i += 1
    return None


class Loaded:
    """One load of the weights (read in, not mapped, as the engine does on Linux) with a
    context of ``CTX`` tokens; ``names`` placed in ``buft``."""

    def __init__(self, ll, weights: Path, threads: int, names: list[str], buft):
        self.ll = ll
        params = ll.llama_model_default_params()
        params.load_mode = ll.LLAMA_LOAD_MODE_NONE
        params.use_extra_bufts = False
        self._keep = [("^" + n.replace(".", r"\.") + "$").encode() for n in names]
        if names:
            table = (_Override * (len(names) + 1))()
            for i, pattern in enumerate(self._keep):
                table[i].pattern, table[i].buft = pattern, buft
            self._table = table
            params.tensor_buft_overrides = ctypes.cast(table, ctypes.c_void_p)
        self.model = ll.llama_model_load_from_file(str(weights).encode(), params)
        if not self.model:
            raise SystemExit(f"llama.cpp refused {weights}")
        cp = ll.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch = CTX, 512, 512
        cp.n_threads = cp.n_threads_batch = threads
        cp.no_perf = True
        self.ctx = ll.llama_init_from_model(self.model, cp)
        self.mem = ll.llama_get_memory(self.ctx)

    def prefill(self, tokens: list[int]) -> float:
        """Seconds to prefill ``tokens`` from an empty context, 512 at a time."""
        self.ll.llama_memory_clear(self.mem, True)
        spent = sum(decode_sequence(self.ll, self.ctx, 0, tokens[s:s + 512], s, False)
                    for s in range(0, len(tokens), 512))
        self.ll.llama_memory_clear(self.mem, True)
        return spent

    def step(self, tokens: list[int], at: int) -> float:
        """Seconds of one decode of ``tokens`` (logits at each) at position ``at``, after
        the ``at`` tokens already in the KV; the batch is rolled back."""
        spent = decode_sequence(self.ll, self.ctx, 0, tokens, at, True)
        self.ll.llama_memory_seq_rm(self.mem, 0, at, -1)
        return spent

    def close(self) -> None:
        self.ll.llama_free(self.ctx)
        self.ll.llama_model_free(self.model)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--prefill", type=int, default=2048, help="prompt tokens to prefill")
    ap.add_argument("--sizes", default="1,2,3,4,5,8", help="positions per decode step")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    weights = args.weights or default_weights()
    sizes = [int(s) for s in args.sizes.split(",")]
    flags = cpu_flags()
    names, taken, total = repacked(gguf_tensors(weights), flags)
    buft = repack_buffer_type()
    print(f"{weights.name}, {args.threads} threads; AMX on this CPU: "
          f"{'yes' if 'amx_tile' in flags else 'no'}")
    print(f"repackable here: {len(names)} matrices, {taken / 2**20:.0f} of "
          f"{total / 2**20:.0f} MiB of layer weights")
    if not names or buft is None:
        raise SystemExit("nothing to compare: no matrix this CPU repacks, or no CPU_REPACK "
                         "buffer type in this llama.cpp build")

    from llama_cpp import llama_cpp as ll

    from hypnos.engines.llama import log as ggml_log
    ggml_log.route_once(ll, "hypnos.bench.cpu_repack", ll.llama_log_set)
    ll.llama_backend_init()
    span = 20000
    prompt = [(i * 7919) % span + 100 for i in range(max(args.prefill, 512 + max(sizes)))]
    with ggml_log.capture("hypnos.bench.cpu_repack") as lines:
        runs = {"plain": Loaded(ll, weights, args.threads, [], None),
                "repacked": Loaded(ll, weights, args.threads, names, buft)}
    print("llama.cpp: " + "; ".join(line.split(":", 1)[1].strip() for line in lines
                                    if "model buffer size" in line))
    prefill: dict[str, list[float]] = {k: [] for k in runs}
    steps: dict[str, dict[int, list[float]]] = {k: {b: [] for b in sizes} for k in runs}
    try:
        for loaded in runs.values():                # warm each shape up, fill the context
            loaded.prefill(prompt[:512])
        for _ in range(2):
            for name, loaded in runs.items():
                prefill[name].append(loaded.prefill(prompt[:args.prefill]))
        for loaded in runs.values():
            decode_sequence(ll, loaded.ctx, 0, prompt[:512], 0, False)
        for r in range(args.rounds + 1):
            for name, loaded in (runs.items() if r % 2 else reversed(runs.items())):
                for b in sizes:
                    spent = loaded.step(prompt[512:512 + b], 512)
                    if r:
                        steps[name][b].append(spent)
    finally:
        for loaded in runs.values():
            loaded.close()

    def rate(name: str) -> float:
        return args.prefill / min(prefill[name])

    print(f"\n{'':24} {'plain':>9} {'repacked':>9} {'repacked / plain':>17}")
    print(f"{f'prefill {args.prefill} tok/s':24} {rate('plain'):9.1f} {rate('repacked'):9.1f} "
          f"{rate('repacked') / rate('plain'):16.2f}x")
    for b in sizes:
        p, q = (statistics.median(steps[n][b]) * 1000 for n in ("plain", "repacked"))
        label = "decode step ms" if b == 1 else f"{b} positions ms"
        print(f"{label:24} {p:9.1f} {q:9.1f} {p / q:16.2f}x faster")
    print("\n(positions: a step verifying b - 1 drafted tokens; 'faster' is plain / repacked)")


if __name__ == "__main__":
    main()
