"""service.scheduling.allocator: the arena cap asked for, and the calls into glibc."""
import platform

from hypnos.service.scheduling.allocator import ARENA_MAX_DEFAULT, arena_max, cap_arenas, trim

GLIBC = platform.libc_ver()[0] == "glibc"


def test_arena_max_reads_the_environment():
    assert arena_max({}) == ARENA_MAX_DEFAULT == 2
    assert arena_max({"HYPNOS_MALLOC_ARENA_MAX": "4"}) == 4
    assert arena_max({"HYPNOS_MALLOC_ARENA_MAX": "0"}) == 0          # glibc's own default
    assert arena_max({"HYPNOS_MALLOC_ARENA_MAX": "lots"}) == ARENA_MAX_DEFAULT
    assert arena_max({"HYPNOS_MALLOC_ARENA_MAX": "-3"}) == ARENA_MAX_DEFAULT


def test_zero_sets_nothing():
    assert cap_arenas(0) is False


def test_trim_and_cap_reach_glibc_where_it_is_the_libc():
    assert trim() is GLIBC
    assert trim({"HYPNOS_MALLOC_TRIM": "0"}) is False
    assert cap_arenas(8) is GLIBC        # 8 arenas: what glibc allows a 1-core host anyway
