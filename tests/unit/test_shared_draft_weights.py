"""The process's draft registry (issue 30): one load per file and place, counted users, freed
with the last release (a refused load holds nothing). Plain objects stand for models."""
import pytest

from hypnos.engines.llama.speculative.shared_weights import SharedWeights


def test_the_registry_counts_users_and_frees_on_the_last_release(tmp_path):
    reg, freed = SharedWeights(), []
    path = tmp_path / "d.gguf"
    key = reg.key(path, gpu_layers=0, extra_bufts=True)
    first = reg.acquire(key, lambda: object())
    second = reg.acquire(key, lambda: pytest.fail("loaded twice"))
    assert first is second and reg.loads == 1 and reg.users(path) == 2
    on_gpu = reg.acquire(reg.key(path, gpu_layers=-1, extra_bufts=True), lambda: object())
    assert on_gpu is not first and reg.loads == 2
    reg.release(first, freed.append)
    assert freed == [] and reg.users(path) == 2
    reg.release(second, freed.append)
    assert freed == [first]
    assert reg.acquire(key, lambda: None) is None and reg.users(path) == 1   # refused: not held
