"""OCR in POST /v1/documents/convert through the real docling engine and RapidOCR's PP-OCRv6
models (inside the rapidocr wheel), on scans the tests draw: Pillow renders words into an
image, saved as an image-only PDF (no text layer) or as a PNG. OCR output varies a little
across CPUs, so a test asks for most of the words, never an exact text."""
import base64
import io
import re

import pytest
from sanic import Sanic

from test_documents import app_for, assert_400, make_pdf, post_file

Sanic.test_mode = True
pytestmark = pytest.mark.anyio

WORDS = ("HYPNOS", "INVOICE", "4711", "QUARTERLY")
LINES = ("HYPNOS INVOICE 4711", "QUARTERLY TOTALS")


def scan_image(lines=LINES, size=(1275, 1650)):
    """A letter page at 150 dpi: black words, 72 px high, on white."""
    from PIL import Image, ImageDraw, ImageFont
    img = Image.new("RGB", size, "white")
    draw, font = ImageDraw.Draw(img), ImageFont.load_default(size=72)
    for i, line in enumerate(lines):
        draw.text((120, 200 + 160 * i), line, fill="black", font=font)
    return img


def scanned_pdf() -> bytes:
    """One page holding only an image of text (Pillow's PDF writer: no text layer)."""
    buf = io.BytesIO()
    scan_image().save(buf, "PDF", resolution=150.0)
    return buf.getvalue()


def mixed_pdf() -> bytes:
    """Page 1 has a text layer; page 2 is the scan, drawn over the whole page (reportlab)."""
    from reportlab.lib.pagesizes import letter
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas
    buf = io.BytesIO()
    c = canvas.Canvas(buf, pagesize=letter)
    c.drawString(72, 720, "First page: the introduction talks about lighthouses.")
    c.showPage()
    c.drawImage(ImageReader(scan_image()), 0, 0, width=letter[0], height=letter[1])
    c.showPage()
    c.save()
    return buf.getvalue()


def found(text: str) -> set[str]:
    """The test words present in ``text`` (case-insensitive, whole words)."""
    return {w for w in WORDS if re.search(rf"\b{w}\b", text, re.IGNORECASE)}


def most_words(text: str) -> bool:
    return len(found(text)) >= len(WORDS) - 1


async def documented_schema(app) -> dict:
    doc = (await app.asgi_client.get("/openapi.json"))[1].json
    return doc["paths"]["/v1/documents/convert"]["post"]["responses"]["200"]["content"][
        "application/json"]["schema"]


async def test_a_scanned_page_comes_back_as_text_and_not_without_ocr():
    from jsonschema import validate
    app = app_for()
    resp = await post_file(app, scanned_pdf(), "scan.pdf")           # ocr: auto
    assert resp.status == 200, resp.text
    body = resp.json
    assert most_words(body["markdown"]), body["markdown"]
    assert body["ocr"] == {"engine": "rapidocr", "pages": [1]}
    assert body["pages"][0]["ocr"] is True and body["ocr_engine"] == "rapidocr"
    assert body["layout_model"] is False and "layout model" in body["warning"]
    assert body["pages"][0]["pictures"] == 0         # the scan is not a picture once read
    validate(body, await documented_schema(app))
    off = (await post_file(app, scanned_pdf(), "scan.pdf", ocr="false")).json
    assert found(off["markdown"]) == set() and off["ocr"] is None
    assert off["pages"][0]["ocr"] is False and off["pages"][0]["pictures"] == 1


async def test_auto_reads_only_pages_without_a_text_layer_and_true_reads_every_page():
    app = app_for()
    auto = (await post_file(app, mixed_pdf(), "mixed.pdf", ocr="auto")).json
    assert auto["ocr"] == {"engine": "rapidocr", "pages": [2]}
    first, second = auto["pages"]
    assert "lighthouses" in first["markdown"] and first["ocr"] is False
    assert most_words(second["markdown"]) and found(first["markdown"]) == set()
    forced = (await post_file(app, mixed_pdf(), "mixed.pdf", ocr="true")).json
    assert forced["ocr"] == {"engine": "rapidocr", "pages": [1, 2]}
    assert re.search(r"lighthouse", forced["pages"][0]["markdown"], re.IGNORECASE)
    assert most_words(forced["pages"][1]["markdown"])


async def test_a_text_layer_pdf_runs_no_ocr_under_auto():
    _req, resp = await app_for().asgi_client.post("/v1/documents/convert", json={
        "model": "docling", "file": base64.b64encode(make_pdf()).decode(),
        "filename": "doc.pdf", "ocr": "auto"})
    body = resp.json
    assert resp.status == 200 and body["ocr"] is None
    assert [p["ocr"] for p in body["pages"]] == [False, False]
    assert "lighthouses" in body["markdown"]


async def test_an_image_is_read_by_ocr_and_refused_with_ocr_false():
    buf = io.BytesIO()
    scan_image(size=(1000, 500)).save(buf, "PNG")
    app = app_for()
    _req, resp = await app.asgi_client.post("/v1/documents/convert", json={
        "model": "docling", "file": base64.b64encode(buf.getvalue()).decode(), "ocr": True})
    assert resp.status == 200, resp.text
    body = resp.json
    assert body["format"] == "image" and body["pipeline"] == "ocr"
    assert body["ocr"] == {"engine": "rapidocr", "pages": [1]} and most_words(body["markdown"])
    assert_400(await post_file(app, buf.getvalue(), "scan.png", ocr="off"), "ocr",
               "no text layer")


@pytest.mark.parametrize("value", ["maybe", "2", "always"])
async def test_a_bad_ocr_value_is_400_naming_it(value):
    assert_400(await post_file(app_for(), make_pdf(), "doc.pdf", ocr=value), "ocr",
               "auto, true or false")


@pytest.mark.parametrize("value", ["always", 1, ["auto"]])
async def test_a_bad_ocr_value_in_json_is_400_naming_it(value):
    _req, resp = await app_for().asgi_client.post("/v1/documents/convert", json={
        "model": "docling", "file": base64.b64encode(make_pdf()).decode(), "ocr": value})
    assert_400(resp, "ocr", "auto, true or false")


async def test_health_says_what_the_docling_model_can_do_here():
    body = (await app_for().asgi_client.get("/health"))[1].json
    docling = body["documents"]["docling"]
    assert docling["layout_model"] is False and docling["ocr_engine"] == "rapidocr"
    assert "layout model" in docling["warning"] and "rapidocr" in docling["warning"]


def test_ocr_lines_are_ordered_top_to_bottom_then_left_to_right():
    from hypnos.engines.docling_ocr import OcrLine, order_items, page_scale
    right = OcrLine("right", 0.9, (300, 102, 400, 122))
    left = OcrLine("left", 0.9, (10, 100, 100, 120))     # same row: 2 px higher
    below = OcrLine("below", 0.9, (10, 200, 100, 220))
    picture = object()
    assert order_items([below, right, left], [(150.0, picture)]) == [left, right, picture,
                                                                      below]
    assert page_scale(612, 792) == pytest.approx(2000 / 792)
    assert page_scale(100, 200) == 3.0


async def test_a_multi_page_tiff_comes_back_one_page_per_frame():
    frames = [scan_image((line,), size=(1000, 360)) for line in LINES]
    buf = io.BytesIO()
    frames[0].save(buf, "TIFF", save_all=True, append_images=frames[1:])
    body = (await post_file(app_for(), buf.getvalue(), "scans.tiff")).json
    assert body["page_count"] == 2 and body["ocr"] == {"engine": "rapidocr", "pages": [1, 2]}
    first, second = (p["markdown"] for p in body["pages"])
    assert len(found(first)) >= 2 and "QUARTERLY" not in first.upper()
    assert re.search(r"QUARTERLY", second, re.IGNORECASE) and "HYPNOS" not in second.upper()
