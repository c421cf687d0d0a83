"""Document conversion with docling (engine kind ``docling``): PDF, DOCX, PPTX, XLSX, HTML and
Markdown to Markdown, one page at a time.

PDFs run through docling's native text-layer pipeline (docling-parse: the text cells and the
embedded bitmaps, no layout, tables or reading order) unless the model's ``weights_path`` is
a folder holding docling's layout model *and* docling's model libraries are installed; then
the full layout pipeline runs (``artifacts_path`` = that folder). Which one ran is reported
as ``OpenedDocument.pipeline``. Office and web formats go through docling's simple pipeline,
converted whole when opened: DOCX, HTML and Markdown come back as one page numbered 1, PPTX
as one page per slide and XLSX per sheet. Images need the layout pipeline (no text layer).

docling is imported in ``load()`` only; without it ``load`` raises
``EngineUnavailable("docling", "docs")``.
"""
from __future__ import annotations

import importlib.util
import io
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import PurePath

from hypnos.engines.errors import BadPageRange, EngineError, EngineUnavailable, UnsupportedDocument
from hypnos.engines.records import (
    ConvertedPage, DocumentPicture, DocumentRequest, LoadReport, LoadSpec, OnPage,
    OpenedDocument,
)

PAGED = ("pdf", "image")
# Formats read by extension when the bytes alone cannot tell (text formats).
TEXT_EXTENSIONS = {".html": "html", ".htm": "html", ".xhtml": "html", ".md": "md",
                   ".markdown": "md"}
ZIP_PARTS = (("word/", "docx"), ("ppt/", "pptx"), ("xl/", "xlsx"))
EXTENSION = {"pdf": ".pdf", "docx": ".docx", "pptx": ".pptx", "xlsx": ".xlsx",
             "html": ".html", "md": ".md", "image": ".png"}


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
    done: object = None          # the whole conversion of a format without pages


class DoclingConverter:
    """``Converter`` over docling's DocumentConverter. Calls are serialised by a lock (one
    docling converter is not documented as thread-safe); ``slots`` > 1 only queues."""

    device = "cpu"            # docling-slim has no torch: every page is converted on the host

    kind = "docling"

    def __init__(self) -> None:
        self._converters: dict[bool, object] = {}
        self._layout_path = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle

    def load(self, spec: LoadSpec) -> LoadReport:
        """Import docling and build the converters. Blocks (about a second)."""
        t0 = time.perf_counter()
        try:
            import docling.document_converter  # noqa: F401
            from docling_core.types.doc import PictureItem, TableItem  # noqa: F401
        except ImportError as exc:
            raise EngineUnavailable("docling", "docs") from exc
        weights = spec.weights_path
        has_models = importlib.util.find_spec("docling_ibm_models") is not None
        self._layout_path = weights if weights is not None and weights.is_dir() \
            and has_models else None
        with self._lock:
            self._converters = {}
        return LoadReport(load_mode="read", total_ms=(time.perf_counter() - t0) * 1e3)

    def unload(self) -> None:
        with self._lock:
            self._converters = {}

    @property
    def pipeline(self) -> str:
        return "layout" if self._layout_path is not None else "native"

    def _converter(self, ocr: bool):
        """One DocumentConverter per OCR setting, built on first use."""
        if ocr not in self._converters:
            self._converters[ocr] = self._build(ocr)
        return self._converters[ocr]

    def _build(self, ocr: bool):
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
        opts = PdfPipelineOptions(artifacts_path=self._layout_path, do_ocr=ocr,
                                  do_table_structure=False, generate_picture_images=True)
        return DocumentConverter(allowed_formats=formats + [InputFormat.IMAGE], format_options={
            InputFormat.PDF: PdfFormatOption(pipeline_options=opts),
            InputFormat.IMAGE: ImageFormatOption(pipeline_options=opts)})

    # ------------------------------------------------------------------ requests

    def open(self, req: DocumentRequest) -> OpenedDocument:
        fmt = detect_format(req.data, req.filename)
        if fmt == "image" and self._layout_path is None:
            raise UnsupportedDocument("images have no text layer: converting them needs "
                                      "docling's layout model (the docling-layout entry)")
        stem = PurePath(req.filename or "document").stem or "document"
        handle = _Handle(req, stem + EXTENSION[fmt])
        if fmt == "pdf":
            count = _pdf_page_count(req.data)
        else:
            # Converted whole up front; PPTX slides and XLSX sheets come back as pages.
            handle.done = self._run(handle, None)
            count = max(1, len(handle.done.document.pages))
        pages = _page_list(req.pages, count)
        pipeline = self.pipeline if fmt in PAGED else "simple"
        return OpenedDocument(fmt, count, pages, pipeline, handle)

    def convert_pages(self, doc: OpenedDocument, on_page: OnPage,
                      cancel: threading.Event) -> list[ConvertedPage]:
        handle: _Handle = doc.handle
        out: list[ConvertedPage] = []
        for number in doc.pages:
            if cancel.is_set():
                break
            t0 = time.perf_counter()
            if handle.done is None:
                document = self._run(handle, number).document
            else:
                document = handle.done.document
                if len(document.pages) > 1:
                    document = document.filter(page_nrs={number})
            page = _page_from(document, number, handle.req)
            page.ms = (time.perf_counter() - t0) * 1e3
            out.append(page)
            on_page(page)
        return out

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


def _page_from(document, number: int, req: DocumentRequest) -> ConvertedPage:
    from docling_core.types.doc import PictureItem, TableItem
    pictures, tables = [], 0
    for item, _level in document.iterate_items():
        if isinstance(item, TableItem):
            tables += 1
        elif isinstance(item, PictureItem):
            pictures.append(_picture(document, item, number, req.want_pictures))
    return ConvertedPage(page=number, markdown=document.export_to_markdown(),
                         pictures=pictures, tables=tables,
                         json=document.export_to_dict() if req.want_json else None)


def _picture(document, item, page: int, want_bytes: bool) -> DocumentPicture:
    pic = DocumentPicture(page=page, mime="image/png", data=None, ref=item.self_ref)
    caption = item.caption_text(document)
    pic.caption = caption or None
    if item.prov:
        prov = item.prov[0]
        b = prov.bbox
        pic.bbox = {"l": b.l, "t": b.t, "r": b.r, "b": b.b,
                    "coord_origin": b.coord_origin.value}
        size = document.pages.get(prov.page_no)
        if size is not None:
            pic.page_size = {"width": size.size.width, "height": size.size.height}
    if item.image is not None:
        pic.dpi = item.image.dpi
        pic.width, pic.height = int(item.image.size.width), int(item.image.size.height)
    if want_bytes:
        image = item.get_image(document)
        if image is not None:
            buf = io.BytesIO()
            image.save(buf, format="PNG")
            pic.data = buf.getvalue()
            pic.width, pic.height = image.size
    return pic
