"""cli/llama_build.py: builds kept once per machine, outside the clone, keyed by version and
CMake arguments (never pip's wheel cache, which keys a wheel built from an sdist by the
sdist)."""
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "cli"))
import llama_build  # noqa: E402


def test_the_cache_is_outside_the_clone_and_movable(tmp_path):
    assert llama_build.cache_root({"HYPNOS_BUILD_CACHE": str(tmp_path)}) == tmp_path
    assert llama_build.cache_root({"XDG_CACHE_HOME": "/x"}) == llama_build.Path("/x/hypnos")
    home = llama_build.cache_root({})
    assert ROOT not in home.parents


def test_other_cmake_arguments_never_share_a_wheel_folder(tmp_path):
    rpc = llama_build.wheel_dir(llama_build.RPC_ARGS, tmp_path)
    plain = llama_build.wheel_dir([], tmp_path)
    cuda = llama_build.wheel_dir(["-DGGML_CUDA=on", *llama_build.RPC_ARGS], tmp_path)
    assert len({rpc, plain, cuda}) == 3
    assert rpc.name.startswith(f"llama_cpp_python-{llama_build.VERSION}-")
    assert "-DGGML_RPC=ON" in llama_build.RPC_ARGS
    assert "-DGGML_RPC=ON" in llama_build.RPC_SERVER_ARGS


def test_a_cached_wheel_is_used_as_is(tmp_path):
    out = llama_build.wheel_dir(llama_build.RPC_ARGS, tmp_path)
    out.mkdir(parents=True)
    wheel = out / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"
    wheel.write_bytes(b"cached")
    # No pip, no compiler: the python given does not even exist.
    assert llama_build.build_wheel("/nonexistent/python", llama_build.RPC_ARGS, tmp_path) == wheel
    binary = llama_build.rpc_server_path(tmp_path)
    binary.write_bytes(b"cached")
    assert llama_build.rpc_server_binary(tmp_path, python="/nonexistent/python") == binary
