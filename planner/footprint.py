"""Footprint estimates: KV cache per token and a `ModelShape` from architecture numbers.

Used where only catalog estimates are known (the advisor, a config without a GGUF on disk);
a GGUF on disk gives exact tensor sizes instead (``engines.gguf_meta``).
"""
from __future__ import annotations

from hypnos.planner.types import MIB, ModelShape

# A vocabulary size to stand in for the unknown one: Llama 2's, a lower bound on modern
# vocabularies (32k-262k), so the embedding share below errs small.
REFERENCE_VOCAB = 32_000
# The embedding + output share never exceeds this fraction of the weights (it reaches about
# 20% only in tiny models with large vocabularies, e.g. SmolLM2-135M: 21%).
MAX_NON_LAYER_FRACTION = 0.25
# Same compute-buffer estimate as engines.gguf_meta: one micro-batch of f32 activations.
WORKSPACE_UBATCH = 512
WORKSPACE_FLOOR_BYTES = 32 * MIB
# A non-layered model (whisper, ONNX, docling, ...): its runtime's arena and buffers.
WHOLE_MODEL_WORKSPACE_BYTES = 64 * MIB


def kv_bytes_per_token(num_layers: int, head_count_kv: int, head_dim: int,
                       bytes_per_element: int = 2) -> int:
    """KV-cache bytes one token of context costs: K and V, every layer (f16 by default)."""
    return 2 * num_layers * head_count_kv * head_dim * bytes_per_element


def estimate_workspace_bytes(embedding_length: int) -> int:
    """llama.cpp's compute buffer, estimated like ``GgufMeta.workspace_bytes``: a 32 MiB floor
    plus 512 tokens x 4 bytes x (vocab + 4 x embedding + 2 x feed-forward width), with the
    reference 32000-token vocabulary and a feed-forward width of 4 x embedding:
    32 MiB + 2048 x (32000 + 12 x embedding_length). Attention scores are not included
    (flash attention does not materialise them)."""
    per_token = 4 * (REFERENCE_VOCAB + 4 * embedding_length + 2 * 4 * embedding_length)
    return WORKSPACE_FLOOR_BYTES + WORKSPACE_UBATCH * per_token


def non_layer_fraction(num_layers: int, embedding_length: int,
                       expert_fraction: float = 0.0) -> float:
    """Share of the weights outside the repeating blocks (token embedding + output head).

    Parameters are estimated as num_layers x 12 x d^2 (attention 4 d^2 + MLP 8 d^2; an MoE
    block is larger by 1 / (1 - expert_fraction)) plus 2 x 32000 x d for an untied embedding
    and output head; the share is the latter over the total, at most 0.25. Quantization
    cancels out (both parts are assumed to be stored alike). Without an embedding width the
    cap is used.
    """
    if embedding_length <= 0 or num_layers <= 0:
        return MAX_NON_LAYER_FRACTION
    dense_share = 1.0 - min(max(expert_fraction, 0.0), 0.95)
    layer_params = num_layers * 12 * embedding_length ** 2 / dense_share
    embed_params = 2 * REFERENCE_VOCAB * embedding_length
    return min(MAX_NON_LAYER_FRACTION, embed_params / (layer_params + embed_params))


def shape_from_arch(weights_bytes: int, *, num_layers: int, embedding_length: int,
                    head_count_kv: int, head_dim: int, context_length: int,
                    expert_fraction: float = 0.0, projector_bytes: int = 0,
                    gpu_capable: bool = True) -> ModelShape:
    """A `ModelShape` from catalog-style architecture numbers.

    ``weights_bytes`` is the weights file alone (the projector is ``projector_bytes``).
    non_layer_bytes = weights x `non_layer_fraction`, layer_bytes = the rest / num_layers
    (the rounding remainder goes to non_layer_bytes, so the parts sum to the weights),
    expert_bytes_per_layer = layer_bytes x expert_fraction, KV per `kv_bytes_per_token`,
    workspace per `estimate_workspace_bytes`. num_layers == 0 gives a whole-model shape:
    weights_bytes + a 64 MiB workspace, no KV.
    """
    if num_layers <= 0:
        return ModelShape(weights_bytes=weights_bytes, workspace_bytes=WHOLE_MODEL_WORKSPACE_BYTES,
                          projector_bytes=projector_bytes, max_context_len=context_length,
                          gpu_capable=gpu_capable)
    frac = non_layer_fraction(num_layers, embedding_length, expert_fraction)
    layer_bytes = int(weights_bytes * (1.0 - frac)) // num_layers
    expert = int(layer_bytes * min(max(expert_fraction, 0.0), 1.0))
    return ModelShape(
        weights_bytes=weights_bytes,
        num_layers=num_layers,
        layer_bytes=layer_bytes,
        non_layer_bytes=weights_bytes - layer_bytes * num_layers,
        expert_bytes_per_layer=expert,
        kv_bytes_per_token=kv_bytes_per_token(num_layers, head_count_kv, head_dim),
        workspace_bytes=estimate_workspace_bytes(embedding_length),
        projector_bytes=projector_bytes,
        max_context_len=context_length,
        gpu_capable=gpu_capable,
    )
