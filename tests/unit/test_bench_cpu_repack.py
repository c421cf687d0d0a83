"""bench/cpu_repack.py's choice of the matrices llama.cpp repacks on x86 (pure: tensor
descriptions in, names out; the bench itself needs a model and minutes)."""
from hypnos.bench.cpu_repack import repacked

TENSORS = [
    ("token_embd.weight", "Q4_K", (896, 151936), 100),     # read by rows: never
    ("blk.0.attn_q.weight", "Q4_K", (896, 896), 10),
    ("blk.0.attn_k.weight", "Q4_K", (896, 130), 2),        # 130 rows: not a multiple of 8
    ("blk.0.ffn_down.weight", "Q6_K", (4864, 896), 30),    # no x86 repack for Q6_K
    ("blk.0.ffn_up.weight", "Q4_0", (896, 4864), 20),
    ("blk.0.ffn_gate.weight", "Q2_K", (896, 4864), 8),     # needs AVX-512
    ("blk.0.attn_norm.weight", "F32", (896,), 1),          # a vector
]


def test_avx2_takes_q4_matrices_of_whole_row_groups_in_the_layers():
    names, taken, total = repacked(TENSORS, {"avx2"})
    assert names == ["blk.0.attn_q.weight", "blk.0.ffn_up.weight"]
    assert (taken, total) == (30, 70)


def test_avx512_adds_q2_k_and_no_avx2_takes_nothing():
    assert repacked(TENSORS, {"avx2", "avx512f"})[0] == [
        "blk.0.attn_q.weight", "blk.0.ffn_up.weight", "blk.0.ffn_gate.weight"]
    assert repacked(TENSORS, {"sse4_2"}) == ([], 0, 70)
