"""Document conversion with docling (engine kind ``docling``): PDF, DOCX, PPTX, XLSX, HTML and
Markdown to Markdown, one page at a time.

PDFs run through docling's native text-layer pipeline (docling-parse: the text cells and the
embedded bitmaps, no layout, tables or reading order) unless the model's ``weights_path`` is
a folder holding docling's layout model *and* docling's model libraries are installed; then
the full layout pipeline runs (``artifacts_path`` = that folder). Which one ran is reported
as ``OpenedDocument.pipeline``. Office and web formats go through docling's simple pipeline,
converted whole when opened: DOCX, HTML and Markdown come back as one page numbered 1, PPTX
as one page per slide and XLSX per sheet.

OCR (``DocumentRequest.ocr``: auto | on | off) uses RapidOCR. Without the layout model a PDF
page is OCR'd (``engines.docling_ocr``) when ``on``, or when ``auto`` and its native
conversion found no text; its OCR lines replace its text layer. Images (no text layer) are
OCR'd frame by frame then, and refused with ``off``. With the layout model docling's own
RapidOCR stage runs (``on``: full-page OCR; ``auto``: docling's regions without text).

docling is imported in ``load()`` only; without it ``load`` raises
``EngineUnavailable("docling", "docs")``. ``prepare`` does that ahead of the first load.
"""
from __future__ import annotations

import importlib.util
import io
import math
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import PurePath

from hypnos.engines import docling_ocr
from hypnos.engines.docling_pages import page_from
from hypnos.engines.errors import (
    BadPageRange, EngineError, EngineUnavailable, OcrUnavailable, UnsupportedDocument,
)
from hypnos.engines.records import (
    ConvertedPage, DocumentRequest, LoadReport, LoadSpec, OnPage, OpenedDocument,
)

PAGED = ("pdf", "image")
# Formats read by extension when the bytes alone cannot tell (text formats).
TEXT_EXTENSIONS = {".html": "html", ".htm": "html", ".xhtml": "html", ".md": "md",
                   ".markdown": "md"}
ZIP_PARTS = (("word/", "docx"), ("ppt/", "pptx"), ("xl/", "xlsx"))
EXTENSION = {"pdf": ".pdf", "docx": ".docx", "pptx": ".pptx", "xlsx": ".xlsx",
             "html": ".html", "md": ".md", "image": ".png"}
NO_LAYOUT = ("docling's layout model is not installed (no package ships it): PDFs convert "
             "from their text layer, with no headings, tables or reading order")


def layout_folder(weights) -> object | None:
    """``weights`` when it is a folder docling's layout pipeline can load (its model
    libraries installed too), else None. Imports nothing."""
    has_models = importlib.util.find_spec("docling_ibm_models") is not None
    return weights if weights is not None and weights.is_dir() and has_models else None


def readiness(weights) -> dict:
    """What a docling model over ``weights`` can do here, for /health: ``layout_model``,
    ``ocr_engine`` (None when no OCR engine is installed) and a ``warning`` for people
    (None when nothing is missing). Cheap: imports nothing."""
    layout = layout_folder(weights) is not None
    ocr = docling_ocr.ENGINE if docling_ocr.model_files() is not None else None
    return {"layout_model": layout, "ocr_engine": ocr, "warning": _warning(layout, ocr)}


def _warning(layout: bool, ocr: str | None) -> str | None:
    if ocr is None:
        lacking = "no OCR engine is installed (rapidocr: pip install 'hypnos[docs]')"
        return f"{NO_LAYOUT}; {lacking}, so scanned pages come back empty" if not layout \
            else f"{lacking}, so scanned pages come back empty"
    if not layout:
        return (f"{NO_LAYOUT}; pages without a text layer, and images, are read by "
                f"{ocr} line by line")
    return None


def detect_format(data: bytes, filename: str) -> str:
    """pdf | docx | pptx | xlsx | html | md | image, from the bytes first and the file name's
    extension for text formats. Raises UnsupportedDocument."""
    head = data[:16]
    ext = PurePath(filename or "").suffix.lower()
    if head.startswith(b"%PDF-"):
        return "pdf"
    if head.startswith((b"\x89PNG", b"\xff\xd8\xff", b"II*\x00", b"MM\x00*", b"BM")) or (
            head[:4] == b"RIFF" and head[8:12] == b"WEBP"):
        return "image"
    if head.startswith(b"PK\x03\x04"):
        try:
            names = zipfile.ZipFile(io.BytesIO(data)).namelist()
        except zipfile.BadZipFile:
            raise UnsupportedDocument("the file looks like a zip archive but is corrupt") \
                from None
        for prefix, fmt in ZIP_PARTS:
            if any(n.startswith(prefix) for n in names):
                return fmt
        raise UnsupportedDocument("a zip archive that is not a DOCX, PPTX or XLSX file")
    try:
        text = data[:4096].decode("utf-8").lstrip().lower()
        if "\x00" in text:
            raise UnicodeDecodeError("utf-8", b"", 0, 1, "NUL byte: binary")
    except UnicodeDecodeError:
        raise UnsupportedDocument(
            f"unsupported document format ({filename or 'no file name'}): expected PDF, "
            "DOCX, PPTX, XLSX, HTML, Markdown or an image") from None
    if ext in TEXT_EXTENSIONS:
        return TEXT_EXTENSIONS[ext]
    if text.startswith(("<!doctype html", "<html")):
        return "html"
    raise UnsupportedDocument(
        f"cannot tell the format of {filename or 'the text file'}: give a file name ending "
        "in .html or .md")


@dataclass
class _Handle:
    req: DocumentRequest
    name: str                    # file name with the extension docling detects by
    fmt: str
    done: object = None          # the whole conversion of a format without pages


class DoclingConverter:
    """``Converter`` over docling's DocumentConverter. Calls are serialised by a lock (one
    docling converter is not documented as thread-safe); ``slots`` > 1 only queues."""

    device = "cpu"            # docling-slim has no torch: every page is converted on the host

    kind = "docling"

    def __init__(self) -> None:
        self._converters: dict[str, object] = {}
        self._layout_path = None
        self._ocr_files: dict | None = None
        self._reader: docling_ocr.RapidOcrReader | None = None
        self._threads: int | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle

    def load(self, spec: LoadSpec) -> LoadReport:
        """Import docling (and RapidOCR where OCR is installed); for the native pipeline, build
        the converter and convert a blank page, since docling sets a pipeline up and imports
        its parser and serialisers on first use, which would otherwise fall on a request.
        Blocks: seconds the first time in a process, under a second after ``prepare``."""
        t0 = time.perf_counter()
        try:
            import docling.document_converter  # noqa: F401
            from docling_core.types.doc import PictureItem, TableItem  # noqa: F401
        except ImportError as exc:
            raise EngineUnavailable("docling", "docs") from exc
        self._layout_path = layout_folder(spec.weights_path)
        self._ocr_files = docling_ocr.model_files()
        self._threads = spec.threads
        if self._ocr_files is not None:
            docling_ocr.prepare()
        with self._lock:
            self._converters, self._reader = {}, None
            if self._layout_path is None:        # (the layout's would run its model)
                _warm(self._converter("auto"))
        return LoadReport(load_mode="read", total_ms=(time.perf_counter() - t0) * 1e3)

    def unload(self) -> None:
        with self._lock:
            self._converters, self._reader = {}, None

    @property
    def pipeline(self) -> str:
        return "layout" if self._layout_path is not None else "native"

    @property
    def ocr_engine(self) -> str | None:
        return docling_ocr.ENGINE if self._ocr_files is not None else None

    def _converter(self, ocr: str):
        """One DocumentConverter per OCR mode, built on first use (the native pipeline,
        which has no OCR stage, is one for all modes)."""
        key = ocr if self._layout_path is not None else "native"
        if key not in self._converters:
            self._converters[key] = self._build(ocr)
        return self._converters[key]

    def _build(self, ocr: str):
        from docling.datamodel.base_models import InputFormat
        from docling.document_converter import DocumentConverter, NativePdfFormatOption
        formats = [InputFormat.PDF, InputFormat.DOCX, InputFormat.PPTX, InputFormat.XLSX,
                   InputFormat.HTML, InputFormat.MD]
        if self._layout_path is None:
            from docling.datamodel.pipeline_options import NativePdfPipelineOptions
            opts = NativePdfPipelineOptions(generate_page_images=False,
                                            generate_picture_images=True)
            return DocumentConverter(allowed_formats=formats, format_options={
                InputFormat.PDF: NativePdfFormatOption(pipeline_options=opts)})
        # The layout pipeline (not exercised by the tests: no layout weights are on the
        # package index). Tables need docling's table model, which is not part of it.
        from docling.datamodel.pipeline_options import PdfPipelineOptions
        from docling.document_converter import ImageFormatOption, PdfFormatOption
        opts = PdfPipelineOptions(artifacts_path=self._layout_path,
                                  do_ocr=ocr != "off" and self._ocr_files is not None,
                                  do_table_structure=False, generate_picture_images=True)
        if self._ocr_files is not None:
            from docling.datamodel.pipeline_options import OcrMode, RapidOcrOptions
            files = self._ocr_files
            opts.ocr_options = RapidOcrOptions(
                mode=OcrMode.FULL_PAGE if ocr == "on" else OcrMode.DEFAULT,
                det_model_path=str(files["det"]), rec_model_path=str(files["rec"]),
                cls_model_path=str(files["cls"]))
        return DocumentConverter(allowed_formats=formats + [InputFormat.IMAGE], format_options={
            InputFormat.PDF: PdfFormatOption(pipeline_options=opts),
            InputFormat.IMAGE: ImageFormatOption(pipeline_options=opts)})

    # ------------------------------------------------------------------ requests

    def open(self, req: DocumentRequest) -> OpenedDocument:
        fmt = detect_format(req.data, req.filename)
        self._check_ocr(fmt, req.ocr)
        stem = PurePath(req.filename or "document").stem or "document"
        handle = _Handle(req, stem + EXTENSION[fmt], fmt)
        pipeline = self.pipeline if fmt in PAGED else "simple"
        if fmt == "pdf":
            count = _pdf_page_count(req.data)
        elif fmt == "image" and self._layout_path is None:
            count, pipeline = docling_ocr.image_frames(req.data), "ocr"
        else:
            # Converted whole up front; PPTX slides and XLSX sheets come back as pages.
            handle.done = self._run(handle, None)
            count = max(1, len(handle.done.document.pages))
        pages = _page_list(req.pages, count)
        layout = self._layout_path is not None
        return OpenedDocument(fmt, count, pages, pipeline, handle, layout_model=layout,
                              ocr_engine=self.ocr_engine,
                              warning=_warning(layout, self.ocr_engine) if fmt in PAGED
                              else None)

    def _check_ocr(self, fmt: str, mode: str) -> None:
        """Refuse up front what OCR cannot do here (OcrUnavailable, a 400 naming ocr)."""
        lacking = "no OCR engine is installed here (rapidocr: pip install 'hypnos[docs]')"
        if mode == "on" and self.ocr_engine is None:
            raise OcrUnavailable(f"ocr true asks to OCR every page, but {lacking}; send "
                                 "ocr auto or false")
        if fmt != "image" or self._layout_path is not None:
            return
        if self.ocr_engine is None:
            raise OcrUnavailable(f"an image has no text layer: reading it needs OCR (or "
                                 f"docling's layout model), and {lacking}")
        if mode == "off":
            raise OcrUnavailable("an image has no text layer: with ocr false nothing can be "
                                 "read from it; send ocr auto or true")

    def convert_pages(self, doc: OpenedDocument, on_page: OnPage,
                      cancel: threading.Event) -> list[ConvertedPage]:
        handle: _Handle = doc.handle
        out: list[ConvertedPage] = []
        for number in doc.pages:
            if cancel.is_set():
                break
            t0 = time.perf_counter()
            page = self._page(handle, number)
            page.ms = (time.perf_counter() - t0) * 1e3
            out.append(page)
            on_page(page)
        return out

    def _page(self, handle: _Handle, number: int) -> ConvertedPage:
        """One page: docling's conversion, or OCR's lines where the request's mode wants
        them (see the module's docstring). Blocks."""
        req = handle.req
        if handle.done is not None:
            document = handle.done.document
            if len(document.pages) > 1:
                document = document.filter(page_nrs={number})
            return page_from(document, number, req)
        if handle.fmt == "image":
            return self._ocr_page(handle, number, None)
        result = self._run(handle, number)
        if self._layout_path is not None:
            page = page_from(result.document, number, req)
            scores = result.confidence.pages.get(number)
            page.ocr = scores is not None and not math.isnan(scores.ocr_score)
            return page
        if self.ocr_engine is None or not docling_ocr.needs_ocr(req.ocr, result.document):
            return page_from(result.document, number, req)
        return self._ocr_page(handle, number, result.document)

    def _ocr_page(self, handle: _Handle, number: int, native) -> ConvertedPage:
        """Page ``number`` read by RapidOCR: a PDF page rendered (``native``: its docling
        conversion, whose pictures are kept) or an image's frame (``native`` None)."""
        with self._lock:
            if self._reader is None:
                self._reader = docling_ocr.RapidOcrReader(self._ocr_files, self._threads)
            if native is None:
                image, scale = docling_ocr.image_frame(handle.req.data, number), 1.0
                size = image.size
            else:
                image, scale = docling_ocr.render_pdf_page(handle.req.data, number)
                size = (image.width / scale, image.height / scale)     # as rendered (rotated)
            lines = self._reader.read(image, scale)
        name = PurePath(handle.name).stem
        document = docling_ocr.ocr_document(name, number, size, lines, native)
        page = page_from(document, number, handle.req)
        page.ocr = True
        return page

    def _run(self, handle: _Handle, page: int | None):
        """One docling conversion (one page of a PDF, or a whole unpaged document)."""
        from docling.datamodel.base_models import ConversionStatus, DocumentStream
        source = DocumentStream(name=handle.name, stream=io.BytesIO(handle.req.data))
        kwargs = {"page_range": (page, page)} if page is not None else {}
        with self._lock:
            converter = self._converter(handle.req.ocr)
            try:
                result = converter.convert(source, raises_on_error=False, **kwargs)
            except Exception as exc:    # docling raises its own and its parsers' errors
                raise UnsupportedDocument(f"docling could not read {handle.name}: {exc}") \
                    from exc
        if result.status not in (ConversionStatus.SUCCESS, ConversionStatus.PARTIAL_SUCCESS):
            why = "; ".join(e.error_message for e in result.errors) or str(result.status)
            if page is None:
                raise UnsupportedDocument(f"docling could not read {handle.name}: {why}")
            raise EngineError(f"page {page} of {handle.name} failed: {why}")
        return result


# ---------------------------------------------------------------------- helpers

def prepare() -> None:
    """Load and unload a throwaway engine: the imports and first-use set-up of ``load``, done
    in this process ahead of any docling model's load. Start-up staging runs it in a worker
    thread before /ready (registry ``Entry.prepare``), because a model left on disk loads on
    its first request, and importing docling (pandas, scipy, OpenCV; torch where installed)
    holds the GIL for up to 0.3 s at a time even in a worker thread: the event loop stalled
    0.4-0.6 s. Blocks (seconds); nothing to do without docling (the model's load says so)."""
    engine = DoclingConverter()
    try:
        engine.load(LoadSpec(model_id="docling", weights_path=None))
    except EngineUnavailable:
        return
    engine.unload()


def _warm(converter) -> None:
    """One conversion of a blank page through ``converter``, rendered as a page of a request
    is (Markdown and JSON)."""
    from docling.datamodel.base_models import DocumentStream
    source = DocumentStream(name="warm-up.pdf", stream=io.BytesIO(_blank_pdf()))
    result = converter.convert(source, raises_on_error=False)
    page_from(result.document, 1, DocumentRequest(b"", "warm-up.pdf", want_json=True))


def _blank_pdf() -> bytes:
    """A one-page US Letter PDF with nothing on it."""
    import pypdfium2
    pdf = pypdfium2.PdfDocument.new()
    try:
        pdf.new_page(612, 792)
        buf = io.BytesIO()
        pdf.save(buf)
        return buf.getvalue()
    finally:
        pdf.close()


def _pdf_page_count(data: bytes) -> int:
    import pypdfium2
    try:
        pdf = pypdfium2.PdfDocument(data)
    except pypdfium2.PdfiumError as exc:
        raise UnsupportedDocument(f"the PDF cannot be read: {exc}") from None
    try:
        return len(pdf)
    finally:
        pdf.close()


def _page_list(pages: tuple[int, int] | None, count: int) -> list[int]:
    if pages is None:
        return list(range(1, count + 1))
    first, last = pages
    if first > count:
        raise BadPageRange(f"pages {first}-{last} asked, but the document has {count} "
                           f"page{'s' if count != 1 else ''}")
    return list(range(first, min(last, count) + 1))
