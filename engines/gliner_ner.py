"""Zero-shot entity extraction with GLiNER (engine kind ``gliner``).

``weights_path`` is a GLiNER ``save_pretrained`` folder (gliner_config.json and the weights).
It loads with ``local_files_only``: the folder must hold its tokenizer (tokenizer.json and
tokenizer_config.json), or the backbone's tokenizer must already be in the Hugging Face
cache; otherwise the load fails naming that.

GLiNER reads at most ``max_len`` words per pass and degrades with many labels, so texts are
cut into overlapping word windows and labels into families of ``FAMILY_SIZE``; every
(window, family) pair is one pass, batched. Results are shifted back to the text's offsets
(Python string indexes, i.e. Unicode code points), merged, and with ``flat`` reduced to
non-overlapping spans, the highest score winning.

gliner and torch are imported in ``load()`` only; without them ``load`` raises
``EngineUnavailable("gliner", "ner")``.
"""
from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass

from hypnos.engines.errors import EngineError, EngineUnavailable
from hypnos.engines.records import Entity, ExtractRequest, ExtractResult, LoadReport, LoadSpec

FAMILY_SIZE = 8
#: Words per window (GLiNER's own max_len caps it) and words shared by neighbours, more
#: than GLiNER's longest span (max_width, 12 words by default).
WINDOW_WORDS = 256
OVERLAP_WORDS = 32
BATCH_SIZE = 8
# GLiNER's default word splitter (WhitespaceTokenSplitter).
_WORD = re.compile(r"\w+(?:[-_]\w+)*|\S")


@dataclass(frozen=True)
class Window:
    text_index: int
    start: int          # code-point offset of the window in its text
    end: int


def windows_of(text: str, index: int, words: int, overlap: int) -> list[Window]:
    """Overlapping windows of at most ``words`` words covering ``text``."""
    spans = [m.span() for m in _WORD.finditer(text)]
    if len(spans) <= words:
        return [Window(index, 0, len(text))]
    out, first, step = [], 0, max(1, words - overlap)
    while True:
        last = min(first + words, len(spans)) - 1
        out.append(Window(index, spans[first][0], spans[last][1]))
        if last == len(spans) - 1:
            return out
        first += step


def flatten(entities: list[Entity]) -> list[Entity]:
    """Non-overlapping spans, the highest score winning (ties: the longer span)."""
    kept: list[Entity] = []
    for e in sorted(entities, key=lambda e: (-e.score, e.start - e.end)):
        if all(e.end <= k.start or e.start >= k.end for k in kept):
            kept.append(e)
    return kept


def merge(entities: list[Entity], flat: bool) -> list[Entity]:
    """One entity per (start, end, label) with its best score; flattened when ``flat``;
    ordered by offset."""
    best: dict[tuple, Entity] = {}
    for e in entities:
        key = (e.start, e.end, e.label)
        if key not in best or e.score > best[key].score:
            best[key] = e
    out = flatten(list(best.values())) if flat else list(best.values())
    return sorted(out, key=lambda e: (e.start, e.end, -e.score))


def _torch_device(model) -> str:
    """The device type of the model's first parameter ("cpu" when it has none)."""
    try:
        return next(model.parameters()).device.type
    except (AttributeError, StopIteration, TypeError):
        return "cpu"


class GlinerExtractor:
    """``Extractor`` over one GLiNER model on the CPU (or CUDA when torch has it). Calls are
    serialised by a lock: the torch module is shared."""

    kind = "gliner"

    def __init__(self) -> None:
        self._model = None
        self._lock = threading.Lock()
        self.window_words = WINDOW_WORDS
        self.device = "cpu"                 # where torch put the weights ("cuda" or "cpu")

    def load(self, spec: LoadSpec) -> LoadReport:
        """Read the GLiNER folder. Blocks (seconds: torch import and the weights)."""
        t0 = time.perf_counter()
        try:
            import torch  # noqa: F401
            from gliner import GLiNER
        except ImportError as exc:
            raise EngineUnavailable("gliner", "ner") from exc
        folder = spec.weights_path
        if folder is None or not (folder / "gliner_config.json").is_file():
            raise EngineError(f"{spec.model_id}: weights_path must be a GLiNER folder with "
                              f"gliner_config.json, got {folder}")
        try:
            model = GLiNER.from_pretrained(str(folder), local_files_only=True)
        except (OSError, ValueError, RuntimeError, KeyError) as exc:
            hint = "" if (folder / "tokenizer_config.json").is_file() else (
                " (the folder has no tokenizer_config.json, so GLiNER looked for its "
                "backbone's tokenizer in the Hugging Face cache)")
            raise EngineError(f"{spec.model_id}: GLiNER could not load {folder}{hint}: "
                              f"{exc}") from exc
        model.eval()
        with self._lock:
            self._model = model
            self.window_words = min(WINDOW_WORDS, int(model.config.max_len))
            self.device = _torch_device(model)
        return LoadReport(load_mode="read", weights_ms=(time.perf_counter() - t0) * 1e3,
                          total_ms=(time.perf_counter() - t0) * 1e3)

    def unload(self) -> None:
        with self._lock:
            self._model = None

    def extract(self, req: ExtractRequest, cancel: threading.Event) -> ExtractResult:
        with self._lock:
            model = self._model
            if model is None:
                raise EngineError("model not loaded")
            windows = [w for i, t in enumerate(req.texts)
                       for w in windows_of(t, i, self.window_words, OVERLAP_WORDS)]
            families = [req.labels[i:i + FAMILY_SIZE]
                        for i in range(0, len(req.labels), FAMILY_SIZE)]
            found: list[list[Entity]] = [[] for _ in req.texts]
            passes = 0
            for family in families:
                for start in range(0, len(windows), BATCH_SIZE):
                    if cancel.is_set():
                        break
                    batch = windows[start:start + BATCH_SIZE]
                    self._run(model, req, family, batch, found)
                    passes += len(batch)
        return ExtractResult(entities=[merge(f, req.flat) for f in found], windows=passes,
                             families=len(families))

    @staticmethod
    def _run(model, req: ExtractRequest, labels: list[str], batch: list[Window],
             found: list[list[Entity]]) -> None:
        texts = [req.texts[w.text_index][w.start:w.end] for w in batch]
        try:
            results = model.inference(texts, labels, flat_ner=req.flat,
                                      threshold=req.threshold, batch_size=len(texts))
        except (RuntimeError, ValueError, IndexError) as exc:
            raise EngineError(f"GLiNER failed: {exc}") from exc
        for w, spans in zip(batch, results, strict=True):
            text = req.texts[w.text_index]
            for s in spans:
                start, end = w.start + int(s["start"]), w.start + int(s["end"])
                found[w.text_index].append(Entity(text[start:end], s["label"], start, end,
                                                  float(s["score"])))
