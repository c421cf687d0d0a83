"""Which CPU buffer types the llama engine lets llama.cpp use, and whether it reads a chat
model's weights into memory or maps the file: pure, from /proc/cpuinfo text and the build.

Regression: on a Sapphire Rapids host (AMX) every prompt of more than a few tokens died with
SIGSEGV in ``ggml_backend_amx_mul_mat`` (llama-cpp-python 0.3.36 built with -march=native), so
``./run.sh test`` crashed there. The engine now keeps weights out of the extra buffer types on
a CPU that reports AMX."""
from hypnos.engines.llama.cpu import cpu_flags, extra_buffers_ok, reads_weights

AVX512 = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512bw avx512_vnni\n"
AMX = "processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_bf16 amx_tile amx_int8\n"


def test_extra_buffers_stay_on_without_amx():
    assert extra_buffers_ok(AVX512)
    assert extra_buffers_ok("")                 # no flags line (not Linux x86): no AMX


def test_extra_buffers_are_off_on_a_cpu_with_amx():
    assert not extra_buffers_ok(AMX)
    assert not extra_buffers_ok(AVX512 + AMX)


def test_cpu_flags_are_the_flags_lines_words_and_none_without_one():
    assert cpu_flags(AVX512) == {"fpu", "sse", "avx2", "avx512f", "avx512bw", "avx512_vnni"}
    assert "amx_tile" in cpu_flags(AVX512 + AMX) and "avx512bw" in cpu_flags(AVX512 + AMX)
    assert cpu_flags("") == set()
    assert cpu_flags("processor\t: 0\nFeatures\t: fp asimd\n") == set()     # ARM's line


def test_weights_are_read_into_memory_on_a_linux_cpu_build_only():
    assert reads_weights("cpu", platform="linux")
    assert not reads_weights("cpu", rpc_split=True, platform="linux")   # a split keeps the map
    assert not reads_weights("cuda", platform="linux")                 # pinned there: unmeasured
    assert not reads_weights("metal", platform="darwin")
    assert not reads_weights("cpu", platform="darwin")
