"""The startup checks a model added while the server runs goes through (spec section 6):
the POST/PUT /v1/models routes and ``serve --watch-config`` share them."""
from __future__ import annotations

from hypnos.service.config.load import check_model_files
from hypnos.service.config.schema import Config, ModelConfig
from hypnos.service.scheduling.pool import ModelState


def _architecture_problem(m: ModelConfig, st: ModelState, tested: tuple[str, ...] | None,
                          key: str) -> str | None:
    from hypnos.engines.gguf_meta import read_gguf_meta
    weights = st.paths.get("weights_path")
    if m.engine != "ggml_llama" or weights is None:
        return None
    arch = read_gguf_meta(weights).architecture
    if m.arch.architecture and m.arch.architecture != arch:
        return f"{key}.arch.architecture: {m.arch.architecture!r}, but the GGUF reports {arch!r}"
    if tested is not None and arch not in tested:
        return (f"{key}.weights_path: the GGUF's architecture {arch!r} is not one Hypnos has "
                f"been tested with ({', '.join(tested)})")
    return None


def startup_checks(cfg: Config, m: ModelConfig, tested: tuple[str, ...] | None,
                   key: str = "models[0]") -> tuple[ModelState | None, list[str]]:
    """A pool entry for ``m`` and the problems found (each naming its dotted key): files
    inside models_dir and present, readable weights, a tested architecture (``tested``: the
    catalog's tested_architectures; None when the server has no catalog). Blocks (reads the
    GGUF header): run it in a worker thread."""
    from hypnos.service.scheduling.build import build_state
    problems: list[str] = []
    check_model_files(cfg, m, key, problems, must_exist=True)
    if problems:
        return None, problems
    st = build_state(cfg, m)
    problem = st.problem or _architecture_problem(m, st, tested, key)
    return (None, [problem]) if problem else (st, [])
