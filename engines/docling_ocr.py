"""OCR for the docling engine: RapidOCR over a rendered PDF page or an image, when docling's
layout model is absent.

Why not docling's own OCR stage (docling-slim 2.142.1, read from its code and run offline):
its native PDF pipeline has no OCR stage, and its standard pipeline builds the layout model
before anything else (fetching it from the Hugging Face hub, so offline it fails at once) and
takes its OCR regions from the layout's clusters; only ``OcrMode.FULL_PAGE`` would skip them.
So a page that needs OCR is rendered here with pypdfium2 and read by RapidOCR through its own
API, with the PP-OCRv6 ONNX models inside the rapidocr wheel passed by path (nothing is ever
downloaded). The lines become text items of a docling document, so the page renders to
Markdown and JSON like any other. What differs from docling with its layout model: every
line is one paragraph (no headings, lists, tables or reading-order model; lines go top to
bottom, then left to right), and "auto" OCRs a page only when it has no text layer at all
(docling would also OCR the bitmaps inside a page that has one).

Pure, tested without a model: `page_scale`, `has_text`, `needs_ocr`, `order_items`.
"""
from __future__ import annotations

import importlib.util
import io
from dataclasses import dataclass
from pathlib import Path

ENGINE = "rapidocr"
MODES = ("auto", "on", "off")
# The three files RapidOCR's defaults (and docling's RapidOcrOptions) resolve to.
MODEL_FILES = {"det": "PP-OCRv6_det_small.onnx", "rec": "PP-OCRv6_rec_small.onnx",
               "cls": "ch_ppocr_mobile_v2.0_cls_mobile.onnx"}
BASE_SCALE = 3.0        # 216 dpi, docling's OCR scale
MAX_SIDE = 2000         # RapidOCR shrinks a larger image to this side first (max_side_len)
SCAN_SHARE = 0.5        # a picture covering this share of an OCR'd page is the scan itself


def model_files() -> dict[str, Path] | None:
    """The ONNX files inside the installed rapidocr package, or None when rapidocr, one of
    its files or onnxruntime (which runs them) is missing. Imports neither (cheap: /health
    calls it)."""
    try:
        spec = importlib.util.find_spec("rapidocr")
        runtime = importlib.util.find_spec("onnxruntime")
    except (ImportError, ValueError):
        return None
    if runtime is None:
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "models"
    files = {task: folder / name for task, name in MODEL_FILES.items()}
    return files if all(f.is_file() for f in files.values()) else None


def prepare() -> None:
    """Import what a first `RapidOcrReader` imports: RapidOCR (about a second of imports:
    OpenCV, shapely, omegaconf) and onnxruntime, whose binding holds the GIL while it loads.
    The docling engine calls it in ``load``, off the request path. Blocks. A failure is left
    to that first reader, which raises it where the request reports it."""
    try:
        import onnxruntime  # noqa: F401
        from rapidocr import RapidOCR  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken install must not fail the model's load
        pass


@dataclass(frozen=True)
class OcrLine:
    text: str
    confidence: float
    box: tuple[float, float, float, float]   # l, t, r, b in page units, top-left origin


def page_scale(width: float, height: float) -> float:
    """The render scale for a page of ``width`` x ``height`` points: docling's 216 dpi,
    capped where RapidOCR would shrink the image anyway."""
    return min(BASE_SCALE, MAX_SIDE / max(width, height, 1.0))


def has_text(document) -> bool:
    """Whether a docling document holds any non-blank text item (a text layer)."""
    from docling_core.types.doc import TextItem
    return any(isinstance(item, TextItem) and item.text.strip()
               for item, _level in document.iterate_items())


def needs_ocr(mode: str, document) -> bool:
    """on: always; off: never; auto: when the page's native conversion found no text."""
    return mode == "on" or (mode == "auto" and not has_text(document))


def order_items(lines: list[OcrLine], pictures: list[tuple[float, object]]) -> list[object]:
    """Lines and (top, picture) pairs merged top to bottom; lines on one row (tops within
    half a line's height) go left to right. Tops count from the page's top."""
    rows: list[tuple[float, float, object]] = []
    for line in sorted(lines, key=lambda ln: (ln.box[1], ln.box[0])):
        height = line.box[3] - line.box[1]
        if rows and isinstance(rows[-1][2], OcrLine) and \
                abs(line.box[1] - rows[-1][0]) < height / 2:
            rows.append((rows[-1][0], line.box[0], line))     # same row as the last line
        else:
            rows.append((line.box[1], line.box[0], line))
    rows += [(top, 0.0, pic) for top, pic in pictures]
    return [item for _t, _l, item in sorted(rows, key=lambda r: (r[0], r[1]))]


class RapidOcrReader:
    """One RapidOCR instance: three onnxruntime sessions on the CPU, about a second to
    build. Not thread-safe: callers serialise (the docling engine's lock)."""

    def __init__(self, files: dict[str, Path], threads: int | None = None):
        from rapidocr import RapidOCR
        params = {"Global.log_level": "warning", "Det.model_path": str(files["det"]),
                  "Rec.model_path": str(files["rec"]), "Cls.model_path": str(files["cls"])}
        if threads:
            params["EngineConfig.onnxruntime.intra_op_num_threads"] = threads
        self._ocr = RapidOCR(params=params)

    def read(self, image, scale: float = 1.0) -> list[OcrLine]:
        """The text lines of a PIL image rendered at ``scale`` pixels per page unit; boxes
        come back in page units. Blocks (seconds per page on a CPU)."""
        import numpy
        result = self._ocr(numpy.asarray(image.convert("RGB")))
        if result is None or result.boxes is None:
            return []
        lines = []
        for points, text, score in zip(result.boxes.tolist(), result.txts, result.scores,
                                       strict=True):
            xs, ys = [p[0] / scale for p in points], [p[1] / scale for p in points]
            if text.strip():
                lines.append(OcrLine(text.strip(), float(score),
                                     (min(xs), min(ys), max(xs), max(ys))))
        return lines


def render_pdf_page(data: bytes, number: int):
    """(the 1-based page ``number`` as a PIL image, its scale in pixels per point)."""
    import pypdfium2
    pdf = pypdfium2.PdfDocument(data)
    try:
        page = pdf[number - 1]
        scale = page_scale(*page.get_size())
        return page.render(scale=scale).to_pil(), scale
    finally:
        pdf.close()


def image_frames(data: bytes) -> int:
    """How many frames (pages) an image file holds: a multi-page TIFF has several."""
    from PIL import Image
    with Image.open(io.BytesIO(data)) as img:
        return getattr(img, "n_frames", 1)


def image_frame(data: bytes, number: int):
    """The 1-based frame ``number`` of an image file, as an RGB PIL image."""
    from PIL import Image
    with Image.open(io.BytesIO(data)) as img:
        img.seek(number - 1)
        return img.convert("RGB")


def ocr_document(name: str, number: int, size: tuple[float, float], lines: list[OcrLine],
                 native=None):
    """A docling document of page ``number`` (``size`` in page units) holding the OCR lines
    as text items, plus the pictures of ``native`` (the page's native conversion) except
    those covering ``SCAN_SHARE`` of the page: the scan itself, whose text the lines carry."""
    from docling_core.types.doc import (BoundingBox, CoordOrigin, DocItemLabel,
                                        DoclingDocument, PictureItem, ProvenanceItem, Size)
    width, height = size
    doc = DoclingDocument(name=name, origin=native.origin if native is not None else None)
    doc.add_page(page_no=number, size=Size(width=width, height=height))
    pictures = []
    for item, _level in (native.iterate_items() if native is not None else ()):
        if isinstance(item, PictureItem) and item.prov:
            box = item.prov[0].bbox.to_top_left_origin(page_height=height)
            if box.area() < SCAN_SHARE * width * height:
                pictures.append((box.t, item))
    for item in order_items(lines, pictures):
        if isinstance(item, OcrLine):
            left, top, right, bottom = item.box
            box = BoundingBox(l=left, t=top, r=right, b=bottom,
                              coord_origin=CoordOrigin.TOPLEFT)
            doc.add_text(label=DocItemLabel.TEXT, text=item.text, orig=item.text,
                         prov=ProvenanceItem(page_no=number,
                                             bbox=box.to_bottom_left_origin(height),
                                             charspan=(0, len(item.text))))
        else:
            doc.add_picture(image=item.image, prov=item.prov[0])
    return doc
