"""What placement needs to know about a GGUF file, read from its header only.

``read_gguf_meta(path)`` blocks on file I/O (the header, not the tensor data) and raises
``ValueError`` for anything that is not a readable GGUF file.

The header is scanned here with the ``gguf`` package's constants (value types, quantisation
block sizes, magic, alignment) rather than with ``gguf.GGUFReader``: the reader builds a numpy
view for every element of every array, which costs ~4.5 s on a 49k-token vocabulary and grows
with it, while this scan skips the arrays it does not need (~50 ms). A test checks that both
agree on the real SmolLM2 file.
"""
from __future__ import annotations

import mmap
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from gguf.constants import GGML_QUANT_SIZES, GGUF_MAGIC
from gguf.constants import GGMLQuantizationType, GGUFValueType

from hypnos.planner.types import DraftShape, ModelShape

MIB = 1024**2
#: Tokens per llama.cpp micro-batch (its default n_ubatch); sizes the compute workspace.
WORKSPACE_UBATCH = 512
#: Fixed part of the workspace estimate (graph metadata, small scratch buffers).
WORKSPACE_FLOOR_BYTES = 32 * MIB

_LAYER_RE = re.compile(r"^blk\.(\d+)\.")
#: llama.cpp's split naming (gguf-split): ``name-00001-of-00003.gguf``.
_SPLIT_RE = re.compile(r"^(?P<stem>.+)-(?P<n>\d{5})-of-(?P<of>\d{5})\.gguf$")
_SCALAR_FORMATS = {
    GGUFValueType.UINT8: "B", GGUFValueType.INT8: "b",
    GGUFValueType.UINT16: "H", GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I", GGUFValueType.INT32: "i",
    GGUFValueType.FLOAT32: "f", GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "Q", GGUFValueType.INT64: "q",
    GGUFValueType.FLOAT64: "d",
}
#: Arrays longer than this are skipped (their length is kept): vocabularies, merges, scores.
_MAX_ARRAY_KEPT = 4096


@dataclass(frozen=True)
class GgufMeta:
    """The header facts of one GGUF file. Byte counts are of tensor data as stored."""

    path: Path
    architecture: str
    num_layers: int
    embedding_length: int
    head_count: int
    head_count_kv: int               # the largest, when the file gives one per layer
    head_dim: int                    # key length per head
    value_dim: int                   # value length per head (== head_dim unless stated)
    context_length: int
    vocab_size: int
    feed_forward_length: int
    expert_count: int
    expert_used_count: int
    chat_template: str | None
    file_bytes: int
    tensor_bytes: int
    non_layer_bytes: int
    layer_bytes: tuple[int, ...]     # per block, index = block number
    expert_bytes: int                # all tensors whose name contains "_exps"
    expert_layer_bytes: tuple[int, ...] = ()
    kv_heads_per_layer: tuple[int, ...] = field(default=())
    #: MTP (multi-token prediction) blocks, ``<arch>.nextn_predict_layers``: the last ones
    #: of ``num_layers``, which a plain decode skips; > 0 is what ``speculative = "mtp"``
    #: needs (``has_mtp_heads``).
    nextn_layers: int = 0
    #: Blocks with recurrent state (``ssm_*`` tensors: Mamba, Gated DeltaNet), and the
    #: bytes of one sequence's state in each (`recurrent_state_bytes`).
    recurrent_layers: int = 0
    recurrent_layer_state_bytes: int = 0

    @property
    def checkpoint_bytes(self) -> int:
        """One context checkpoint of one slot (``engines.llama.checkpoints``): the recurrent
        layers' state; 0 for a model without recurrent layers (a sliding-window model's
        window cache is full-sized here, so it takes none)."""
        return self.recurrent_layers * self.recurrent_layer_state_bytes

    @property
    def has_mtp_heads(self) -> bool:
        return self.nextn_layers > 0

    @property
    def kv_bytes_per_token(self) -> int:
        """f16 K and V for every layer: 2 bytes x sum over layers of kv_heads x (k + v dims).

        With one head count for all layers this is 2 * layers * kv_heads * head_dim * 2.
        """
        heads = self.kv_heads_per_layer or (self.head_count_kv,) * self.num_layers
        return 2 * sum(heads) * (self.head_dim + self.value_dim)

    @property
    def block_kv_bytes_per_token(self) -> int:
        """f16 K and V of one block (the largest): what an MTP head's own KV costs a token."""
        heads = max(self.kv_heads_per_layer or (self.head_count_kv,))
        return 2 * heads * (self.head_dim + self.value_dim)

    def as_draft(self, model_id: str) -> DraftShape:
        """This file as a draft model of a target: its tensors and its own KV per token."""
        return DraftShape(model_id=model_id, weights_bytes=self.tensor_bytes,
                          kv_bytes_per_token=self.kv_bytes_per_token)

    def mtp_draft(self, mtp_file: GgufMeta | None = None) -> DraftShape:
        """The MTP heads ``speculative = "mtp"`` drafts with: a separate MTP file's tensors
        (``mtp_file``), else this file's ``nextn_layers`` last blocks (already in its
        weights: ``in_target``); their KV is one block's per head
        (``block_kv_bytes_per_token`` x max(1, nextn_layers))."""
        if mtp_file is not None:
            heads = max(1, mtp_file.nextn_layers)
            kv = (mtp_file.block_kv_bytes_per_token or self.block_kv_bytes_per_token) * heads
            return DraftShape(model_id="mtp", weights_bytes=mtp_file.tensor_bytes,
                              kv_bytes_per_token=kv, kind="mtp")
        heads = max(1, self.nextn_layers)
        blocks = self.layer_bytes[len(self.layer_bytes) - self.nextn_layers:] \
            if self.nextn_layers else ()
        return DraftShape(model_id="mtp", weights_bytes=sum(blocks),
                          kv_bytes_per_token=self.block_kv_bytes_per_token * heads,
                          kind="mtp", in_target=True)

    @property
    def workspace_bytes(self) -> int:
        """Estimated llama.cpp compute buffer for one micro-batch of WORKSPACE_UBATCH tokens.

        f32 activations: the logits row per token (vocab), the residual stream and the
        attention/FFN intermediates (4 x embedding + 2 x feed-forward width) per token,
        plus WORKSPACE_FLOOR_BYTES. Context-dependent attention scores are not included
        (llama.cpp uses flash attention where it can, which does not materialise them).
        SmolLM2-135M: estimate 138.5 MiB; llama.cpp reserved 102.5 MiB (n_ubatch 512, FA on).
        """
        per_token = 4 * (self.vocab_size + 4 * self.embedding_length
                         + 2 * self.feed_forward_length)
        return WORKSPACE_FLOOR_BYTES + WORKSPACE_UBATCH * per_token

    def to_shape(self, projector_bytes: int = 0, draft: DraftShape | None = None) -> ModelShape:
        """The planner's view. ``layer_bytes`` and ``expert_bytes_per_layer`` are the largest
        block's (conservative when blocks differ, e.g. dense leading layers in a MoE);
        ``draft``: the speculative drafter booked with it (`as_draft`, `mtp_draft`)."""
        return ModelShape(
            weights_bytes=self.tensor_bytes,
            num_layers=self.num_layers,
            layer_bytes=max(self.layer_bytes, default=0),
            non_layer_bytes=self.non_layer_bytes,
            expert_bytes_per_layer=max(self.expert_layer_bytes, default=0),
            kv_bytes_per_token=self.kv_bytes_per_token,
            workspace_bytes=self.workspace_bytes,
            projector_bytes=projector_bytes,
            max_context_len=self.context_length,
            gpu_capable=True,
            draft=draft,
            checkpoint_bytes=self.checkpoint_bytes,
        )


def split_parts(path: str | Path) -> list[Path]:
    """Every part of a split GGUF (``x-00001-of-00003.gguf`` ...) named like ``path``, in
    order; ``[path]`` for a file that is not split. llama.cpp loads the siblings of the first
    part itself; their bytes are the model's as much as the first part's."""
    path = Path(path)
    m = _SPLIT_RE.match(path.name)
    if m is None or int(m["of"]) < 2:
        return [path]
    of = int(m["of"])
    return [path.with_name(f"{m['stem']}-{i:05d}-of-{of:05d}.gguf") for i in range(1, of + 1)]


def read_gguf_meta(path: str | Path) -> GgufMeta:
    """Read ``path``'s header (every part's, for a split GGUF: the first part holds the
    metadata, each part its own tensors). Raises ValueError when it is not a GGUF file (or
    truncated, or a part is missing)."""
    path = Path(path)
    kv, tensors = _scan(path)
    size = path.stat().st_size
    count = int(kv.get("split.count", 1) or 1)
    if count > 1:
        parts = split_parts(path)
        if len(parts) != count:
            raise ValueError(f"{path}: split.count is {count}, but the file is not named "
                             "NAME-00001-of-0000N.gguf")
        for part in parts:
            if part == path:
                continue
            if not part.is_file():
                raise ValueError(f"{path}: part {part.name} of the split model is missing")
            tensors += _scan(part)[1]
            size += part.stat().st_size
    return _build_meta(path, size, kv, tensors)


def read_gguf_kv(path: str | Path) -> dict:
    """The metadata of ``path`` itself (not of the other parts of a split GGUF); an array of
    more than 4096 items is only counted. Blocks on the header's I/O; ValueError as
    `read_gguf_meta`."""
    return _scan(Path(path))[0]


def _scan(path: Path) -> tuple[dict, list[tuple[str, int]]]:
    with open(path, "rb") as fh:
        size = path.stat().st_size
        if size < 24:
            raise ValueError(f"{path}: not a GGUF file (only {size} bytes)")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            try:
                return _Scanner(mm).scan()
            except (struct.error, IndexError, KeyError, ValueError) as exc:
                raise ValueError(f"{path}: not a readable GGUF file ({exc})") from exc


class _Scanner:
    """Sequential reader over the header of a mapped GGUF file."""

    def __init__(self, buf: mmap.mmap):
        self.buf = buf
        self.pos = 0
        self.order = "<"

    def scan(self) -> tuple[dict, list[tuple[str, int]]]:
        magic = struct.unpack_from("<I", self.buf, 0)[0]
        if magic != GGUF_MAGIC:
            raise ValueError(f"bad magic {magic:#010x}")
        version = struct.unpack_from("<I", self.buf, 4)[0]
        if version & 0xFFFF == 0:            # written on a big-endian host
            self.order, version = ">", struct.unpack_from(">I", self.buf, 4)[0]
        if version not in (2, 3):
            raise ValueError(f"unsupported GGUF version {version}")
        self.pos = 8
        n_tensors, n_kv = self._read("Q"), self._read("Q")
        kv = {}
        for _ in range(n_kv):
            key = self._read_str()
            kv[key] = self._read_value(GGUFValueType(self._read("I")))
        tensors = [self._read_tensor_info() for _ in range(n_tensors)]
        return kv, tensors

    def _read(self, fmt: str):
        value = struct.unpack_from(self.order + fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def _read_str(self) -> str:
        n = self._read("Q")
        raw = self.buf[self.pos:self.pos + n]
        if len(raw) != n:
            raise IndexError("string past end of file")
        self.pos += n
        return raw.decode("utf-8")

    def _read_value(self, vtype: GGUFValueType):
        if vtype == GGUFValueType.STRING:
            return self._read_str()
        if vtype != GGUFValueType.ARRAY:
            return self._read(_SCALAR_FORMATS[vtype])
        etype, count = GGUFValueType(self._read("I")), self._read("Q")
        if count > _MAX_ARRAY_KEPT:
            self._skip_array(etype, count)
            return _SkippedArray(count)
        return [self._read_value(etype) for _ in range(count)]

    def _skip_array(self, etype: GGUFValueType, count: int) -> None:
        if etype == GGUFValueType.STRING:
            for _ in range(count):
                self.pos += 8 + struct.unpack_from(self.order + "Q", self.buf, self.pos)[0]
        elif etype == GGUFValueType.ARRAY:
            for _ in range(count):
                self._read_value(etype)
        else:
            self.pos += count * struct.calcsize(_SCALAR_FORMATS[etype])

    def _read_tensor_info(self) -> tuple[str, int]:
        name = self._read_str()
        dims = [self._read("Q") for _ in range(self._read("I"))]
        qtype = GGMLQuantizationType(self._read("I"))
        self._read("Q")                       # data offset: not needed for sizes
        n_elements = 1
        for d in dims:
            n_elements *= d
        block, type_size = GGML_QUANT_SIZES[qtype]
        return name, n_elements // block * type_size


class _SkippedArray(int):
    """The length of an array the scan skipped (vocabularies are only counted)."""


def _build_meta(path: Path, size: int, kv: dict, tensors: list[tuple[str, int]]) -> GgufMeta:
    arch = kv.get("general.architecture")
    if not isinstance(arch, str):
        raise ValueError(f"{path}: GGUF without general.architecture")

    def num(key: str, default: int = 0) -> int:
        value = kv.get(f"{arch}.{key}", default)
        return max(value) if isinstance(value, list) and value else int(value or 0)

    layers = num("block_count")
    heads = num("attention.head_count")
    kv_raw = kv.get(f"{arch}.attention.head_count_kv", heads)
    kv_per_layer = tuple(int(v) for v in kv_raw) if isinstance(kv_raw, list) else ()
    embd = num("embedding_length")
    head_dim = num("attention.key_length") or (embd // heads if heads else 0)
    layer_bytes, expert_layer, non_layer, experts = _tensor_sums(tensors, layers)
    tokens = kv.get("tokenizer.ggml.tokens", [])
    return GgufMeta(
        path=path, architecture=arch, num_layers=layers, embedding_length=embd,
        head_count=heads, head_count_kv=num("attention.head_count_kv", heads),
        head_dim=head_dim, value_dim=num("attention.value_length") or head_dim,
        context_length=num("context_length"),
        vocab_size=num("vocab_size") or (int(tokens) if isinstance(tokens, int) else len(tokens)),
        feed_forward_length=num("feed_forward_length"),
        expert_count=num("expert_count"), expert_used_count=num("expert_used_count"),
        chat_template=kv.get("tokenizer.chat_template"),
        file_bytes=size, tensor_bytes=sum(n for _, n in tensors),
        non_layer_bytes=non_layer, layer_bytes=tuple(layer_bytes), expert_bytes=experts,
        expert_layer_bytes=tuple(expert_layer), kv_heads_per_layer=kv_per_layer,
        nextn_layers=num("nextn_predict_layers"),
        recurrent_layers=_recurrent_layers(tensors),
        recurrent_layer_state_bytes=recurrent_state_bytes(
            num("ssm.conv_kernel"), num("ssm.inner_size"), num("ssm.state_size"),
            num("ssm.group_count")),
    )


def recurrent_state_bytes(conv_kernel: int, inner: int, state: int, groups: int) -> int:
    """One sequence's state in one recurrent block, as llama.cpp keeps it (f32): the
    convolution's last ``conv_kernel - 1`` inputs over its ``inner + 2 x groups x state``
    channels (x, B and C; a Gated DeltaNet's v, k and q) and the ``state x inner`` SSM state
    (a DeltaNet's key-by-value matrix per head)."""
    if inner <= 0 or state <= 0:
        return 0
    conv = max(conv_kernel - 1, 0) * (inner + 2 * groups * state)
    return 4 * (conv + state * inner)


def _recurrent_layers(tensors: list[tuple[str, int]]) -> int:
    """Blocks carrying ``ssm_*`` tensors (their state is recurrent)."""
    blocks = set()
    for name, _ in tensors:
        match = _LAYER_RE.match(name)
        if match is not None and ".ssm_" in name:
            blocks.add(match.group(1))
    return len(blocks)


def _tensor_sums(tensors: list[tuple[str, int]], layers: int):
    """(bytes per block, expert bytes per block, non-block bytes, all expert bytes)."""
    per_layer = [0] * layers
    expert_layer = [0] * layers
    non_layer = experts = 0
    for name, nbytes in tensors:
        match = _LAYER_RE.match(name)
        is_expert = "_exps" in name
        experts += nbytes if is_expert else 0
        if match is None:
            non_layer += nbytes
            continue
        index = int(match.group(1))
        if index >= len(per_layer):          # a block beyond block_count (e.g. MTP heads)
            per_layer.extend([0] * (index + 1 - len(per_layer)))
            expert_layer.extend([0] * (index + 1 - len(expert_layer)))
        per_layer[index] += nbytes
        expert_layer[index] += nbytes if is_expert else 0
    return per_layer, expert_layer, non_layer, experts
