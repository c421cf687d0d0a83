"""cli.malloc_thp: when `hypnos serve` re-executes itself with glibc's huge-page tunable."""
from hypnos.cli.malloc_thp import launched_as_cli, reexec_env, thp_mode

GLIBC = ("glibc", "2.36")


def test_adds_the_tunable_on_glibc_with_thp_on_madvise():
    assert reexec_env({"A": "1"}, GLIBC, "madvise") == {
        "A": "1", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
    assert reexec_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, GLIBC, "madvise") == {
        "GLIBC_TUNABLES": "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"}


def test_nothing_to_do():
    assert reexec_env({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, GLIBC, "madvise") is None
    assert reexec_env({}, GLIBC, "always") is None         # the kernel does it already
    assert reexec_env({}, GLIBC, "never") is None
    assert reexec_env({}, GLIBC, None) is None
    assert reexec_env({}, ("glibc", "2.31"), "madvise") is None   # no such tunable yet
    assert reexec_env({}, ("", ""), "madvise") is None            # musl, macOS
    assert reexec_env({"HYPNOS_MALLOC_THP": "0"}, GLIBC, "madvise") is None


def test_thp_mode_reads_the_bracketed_word(tmp_path):
    f = tmp_path / "enabled"
    f.write_text("always [madvise] never\n")
    assert thp_mode(str(f)) == "madvise"
    assert thp_mode(str(tmp_path / "missing")) is None


def test_only_the_hypnos_command_itself_is_re_executed():
    assert launched_as_cli(["/work/.venv/bin/hypnos", "serve"])
    assert launched_as_cli(["/usr/bin/python3", "/work/.venv/bin/hypnos", "serve"])
    assert launched_as_cli(["/usr/bin/python3", "-m", "hypnos.cli", "serve", "--port", "1"])
    # serve run inside another program: a test runner, a script embedding the CLI.
    assert not launched_as_cli(["/usr/bin/python3", "-m", "pytest", "tests"])
    assert not launched_as_cli(["/work/.venv/bin/pytest", "-q"])
    assert not launched_as_cli(["/usr/bin/python3", "run_my_server.py"])
    assert not launched_as_cli([])
