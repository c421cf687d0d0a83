"""POST /v1/documents/convert and the picture store, through the real docling engine on
documents the tests generate: a DOCX with a table and a picture (python-docx), an HTML page,
and a two-page text PDF with a picture on page 1 (reportlab)."""
import base64
import io
import json
import os
import subprocess
import sys
import threading

import pytest
from sanic import Sanic

from conftest import MODELS_DIR
from hypnos.catalog.catalog import load_catalog
from hypnos.engines.records import DocumentPicture, DocumentRequest, LoadSpec
from hypnos.service.app import create_app
from hypnos.service.config.load import parse_config
from hypnos.service.media.markdown_join import join_pages
from hypnos.service.inference.pictures import insert_descriptions
from hypnos.service.media.picture_store import PictureStore, PicturesTooLarge

Sanic.test_mode = True
pytestmark = pytest.mark.anyio

CONFIG = f"""
models_dir = "{MODELS_DIR}"
[[models]]
id = "docling"
modality = "document_conversion"
engine = "docling"
[[models]]
id = "chat"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
[[models]]
id = "eyes"
modality = "vision"
engine = "ggml_llama"
weights_path = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
"""


def _png(w: int, h: int, color=(200, 30, 30)) -> bytes:
    from PIL import Image, ImageDraw
    img = Image.new("RGB", (w, h), color)
    ImageDraw.Draw(img).rectangle([5, 5, w - 5, h - 5], outline=(0, 0, 0), width=3)
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def make_docx() -> bytes:
    import docx
    d = docx.Document()
    d.add_heading("Quarterly report", 1)
    d.add_paragraph("Revenue grew in every region.")
    table = d.add_table(rows=3, cols=2)
    for r, (a, b) in enumerate([("Region", "Revenue"), ("North", "120"), ("South", "95")]):
        table.cell(r, 0).text, table.cell(r, 1).text = a, b
    d.add_picture(io.BytesIO(_png(120, 80)))
    d.add_paragraph("The end.")
    buf = io.BytesIO()
    d.save(buf)
    return buf.getvalue()


def make_pdf() -> bytes:
    from reportlab.lib.pagesizes import letter
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas
    buf = io.BytesIO()
    c = canvas.Canvas(buf, pagesize=letter)
    c.drawString(72, 720, "First page: the introduction talks about lighthouses.")
    c.drawImage(ImageReader(io.BytesIO(_png(200, 100))), 72, 500, width=200, height=100)
    c.showPage()
    c.drawString(72, 720, "Second page: the conclusion mentions harbours.")
    c.showPage()
    c.save()
    return buf.getvalue()


def make_pptx() -> bytes:
    from pptx import Presentation
    deck = Presentation()
    for title in ("Apples in spring", "Pears in autumn"):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = f"Notes on {title.lower()}"
    buf = io.BytesIO()
    deck.save(buf)
    return buf.getvalue()


def make_xlsx() -> bytes:
    import openpyxl
    book = openpyxl.Workbook()
    book.active.append(["Region", "Revenue"])
    book.active.append(["North", 120])
    costs = book.create_sheet("Costs")
    costs.append(["Item", "Cost"])
    costs.append(["Rent", 50])
    buf = io.BytesIO()
    book.save(buf)
    return buf.getvalue()


HTML = (b"<html><body><h1>Hello page</h1><p>Some <b>bold</b> text.</p>"
        b"<ul><li>one</li><li>two</li></ul></body></html>")


def app_for(**server):
    import tomllib
    cfg = parse_config(tomllib.loads(CONFIG))
    for k, v in server.items():
        target = cfg.limits if hasattr(cfg.limits, k) else cfg.server
        setattr(target, k, v)
    return create_app(cfg, catalog=load_catalog(), stage=False)


async def post_file(app, data: bytes, filename: str, **fields):
    form = {k: str(v) for k, v in {"model": "docling", **fields}.items()}
    _req, resp = await app.asgi_client.post("/v1/documents/convert", data=form,
                                            files={"file": (filename, data)})
    return resp


def events_of(resp) -> list:
    lines = [ln[len("data: "):] for ln in resp.text.splitlines() if ln.startswith("data: ")]
    return [ln if ln == "[DONE]" else json.loads(ln) for ln in lines]


def assert_400(resp, param: str, fragment: str = ""):
    assert resp.status == 400, resp.text
    err = resp.json["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param, err
    assert fragment in err["message"], err


# ------------------------------------------------------------------ conversions

async def test_docx_with_table_and_picture():
    resp = await post_file(app_for(), make_docx(), "report.docx")
    assert resp.status == 200, resp.text
    body = resp.json
    assert body["object"] == "document" and body["model"] == "docling"
    assert body["filename"] == "report.docx" and body["format"] == "docx"
    assert body["page_count"] == 1 and [p["page"] for p in body["pages"]] == [1]
    assert body["pipeline"] == "simple"
    md = body["markdown"]
    assert "## Quarterly report" in md and "| North" in md and "<!-- image -->" in md
    assert body["usage"] == {"pages": 1, "pictures": 1, "tables": 1, "pictures_described": 0}
    assert body["pages"][0]["tables"] == 1 and body["pages"][0]["pictures"] == 1
    assert "id" not in body and "picture_urls" not in body["pages"][0]
    engine = body["hypnos_telemetry"]["engine"]
    assert engine["pages"] == 1 and engine["ms_per_page"] > 0


async def test_slides_and_sheets_come_back_as_pages():
    app = app_for()
    deck = (await post_file(app, make_pptx(), "deck.pptx")).json
    assert deck["format"] == "pptx" and deck["page_count"] == 2
    assert "Apples" in deck["pages"][0]["markdown"] and "Pears" not in deck["pages"][0]["markdown"]
    assert "Pears" in deck["pages"][1]["markdown"]
    second = (await post_file(app, make_pptx(), "deck.pptx", pages="2")).json
    assert [p["page"] for p in second["pages"]] == [2] and "Apples" not in second["markdown"]
    book = (await post_file(app, make_xlsx(), "book.xlsx")).json
    assert book["format"] == "xlsx" and book["page_count"] == 2
    assert [p["tables"] for p in book["pages"]] == [1, 1]
    assert "| North" in book["pages"][0]["markdown"] and "| Rent" in book["pages"][1]["markdown"]


async def test_html_as_json_base64_and_data_uri():
    app = app_for()
    for file in (base64.b64encode(HTML).decode(),
                 "data:text/html;base64," + base64.b64encode(HTML).decode()):
        _req, resp = await app.asgi_client.post("/v1/documents/convert", json={
            "model": "docling", "file": file, "filename": "page.html"})
        assert resp.status == 200, resp.text
        assert "# Hello page" in resp.json["markdown"] and "- two" in resp.json["markdown"]
        assert resp.json["format"] == "html" and resp.json["page_count"] == 1


async def test_two_page_pdf_through_the_native_pipeline():
    app = app_for()
    body = (await post_file(app, make_pdf(), "doc.pdf")).json
    assert body["page_count"] == 2 and body["pipeline"] == "native"
    assert [p["page"] for p in body["pages"]] == [1, 2]
    assert "lighthouses" in body["pages"][0]["markdown"]
    assert "harbours" in body["pages"][1]["markdown"]
    assert "lighthouses" not in body["pages"][1]["markdown"]
    assert body["pages"][0]["pictures"] == 1 and body["pages"][1]["pictures"] == 0
    assert body["markdown"].index("lighthouses") < body["markdown"].index("harbours")
    only = (await post_file(app, make_pdf(), "doc.pdf", pages="2")).json
    assert only["page_count"] == 2 and [p["page"] for p in only["pages"]] == [2]
    assert "harbours" in only["markdown"] and "lighthouses" not in only["markdown"]
    both = (await post_file(app, make_pdf(), "doc.pdf", pages="1-5")).json
    assert [p["page"] for p in both["pages"]] == [1, 2]
    assert_400(await post_file(app, make_pdf(), "doc.pdf", pages="3"), "pages", "2 pages")


async def test_output_format_json_adds_the_docling_document():
    body = (await post_file(app_for(), make_pdf(), "doc.pdf", output_format="json",
                            pages="1")).json
    page = body["pages"][0]
    assert page["json"]["schema_name"] == "DoclingDocument"
    assert "1" in page["json"]["pages"]


async def test_streaming_events_in_order():
    resp = await post_file(app_for(), make_pdf(), "doc.pdf", stream="true")
    assert resp.status == 200 and resp.headers["content-type"].startswith("text/event-stream")
    events = events_of(resp)
    assert [e if e == "[DONE]" else e["object"] for e in events] == [
        "document.started", "document.page", "document.page", "document", "[DONE]"]
    assert events[0]["page_count"] == 2 and events[0]["pages"] == [1, 2]
    assert [events[1]["page"], events[2]["page"]] == [1, 2]
    assert "harbours" in events[2]["markdown"]
    final = events[3]
    assert final["pages"] == [] and final["usage"]["pages"] == 2
    assert "lighthouses" in final["markdown"] and "hypnos_telemetry" in final


async def test_a_refused_document_gets_its_status_before_the_stream():
    resp = await post_file(app_for(), b"%PDF-1.4 this is not a pdf", "bad.pdf", stream="yes")
    assert_400(resp, "file", "PDF")
    assert not resp.headers["content-type"].startswith("text/event-stream")


async def test_return_pictures_store_and_routes():
    app = app_for()
    body = (await post_file(app, make_pdf(), "doc.pdf", return_pictures="on")).json
    doc_id = body["id"]
    assert doc_id.startswith("doc-") and body["pictures_expire_at"].endswith("Z")
    url = body["pages"][0]["picture_urls"][0]
    assert url == f"/v1/documents/{doc_id}/pictures/1" and body["pages"][1]["picture_urls"] == []
    listing = (await app.asgi_client.get(f"/v1/documents/{doc_id}/pictures"))[1].json
    assert listing["object"] == "list" and listing["document_id"] == doc_id
    (rec,) = listing["data"]
    assert rec["index"] == 1 and rec["page"] == 1 and "image" not in rec
    assert (rec["width"], rec["height"]) == (200, 100) and rec["mime"] == "image/png"
    assert rec["bbox"]["coord_origin"] == "BOTTOMLEFT" and rec["bbox"]["l"] == 72.0
    assert rec["page_size"] == {"width": 612.0, "height": 792.0}
    one = (await app.asgi_client.get(url))[1].json
    png = base64.b64decode(one["image"])
    assert png.startswith(b"\x89PNG") and one["bytes"] == len(png)
    _req, raw = await app.asgi_client.get(url + "?format=image")
    assert raw.status == 200 and raw.body == png
    assert raw.headers["content-type"] == "image/png"
    assert raw.headers["cache-control"] == "private, no-store"
    assert (await app.asgi_client.get(url[:-1] + "2"))[1].status == 404
    deleted = (await app.asgi_client.delete(f"/v1/documents/{doc_id}"))[1].json
    assert deleted == {"object": "document.deleted", "id": doc_id, "deleted": True}
    for resp in ((await app.asgi_client.get(url))[1],
                 (await app.asgi_client.delete(f"/v1/documents/{doc_id}"))[1]):
        assert resp.status == 404 and resp.json["error"]["type"] == "not_found"


async def test_streamed_conversion_files_pictures_under_the_started_id():
    app = app_for()
    events = events_of(await post_file(app, make_docx(), "r.docx", stream=1,
                                       return_pictures=1))
    doc_id = events[0]["id"]
    assert events[1]["picture_urls"] == [f"/v1/documents/{doc_id}/pictures/1"]
    assert events[2]["id"] == doc_id
    rec = (await app.asgi_client.get(events[1]["picture_urls"][0]))[1].json
    assert (rec["width"], rec["height"]) == (120, 80) and rec["bbox"] is None


@pytest.mark.parametrize("data,filename,fragment", [
    (b"\x00\x01\x02 binary junk", "junk.bin", "unsupported document format"),
    (b"%PDF-1.7\n garbage", "x.pdf", "PDF cannot be read"),
    (b"PK\x03\x04 not really a zip", "x.docx", "corrupt"),
    (b"just some words", "notes.txt", "cannot tell the format"),
])
async def test_unsupported_or_corrupt_files_are_400(data, filename, fragment):
    assert_400(await post_file(app_for(), data, filename), "file", fragment)


@pytest.mark.parametrize("fields,param", [
    ({"pages": "0"}, "pages"), ({"pages": "5-2"}, "pages"), ({"pages": "x"}, "pages"),
    ({"output_format": "yaml"}, "output_format"), ({"stream": "maybe"}, "stream"),
    ({"ocr": "2"}, "ocr"), ({"url": "https://example.com/a.pdf"}, "url"),
    ({"describe_pictures": "chat"}, "describe_pictures"), ({"model": "chat"}, "model"),
])
async def test_bad_fields_are_400_naming_them(fields, param):
    assert_400(await post_file(app_for(), HTML, "p.html", **fields), param)


async def test_json_body_errors_and_size_limit():
    app = app_for(max_document_bytes=100)
    for body, param in (({"file": "eA=="}, "model"), ({"model": "docling"}, "file"),
                        ({"model": "docling", "file": "%%%"}, "file"),
                        ({"model": "docling", "file": 5}, "file")):
        assert_400((await app.asgi_client.post("/v1/documents/convert", json=body))[1], param)
    assert_400(await post_file(app, HTML * 2, "p.html"), "file", "max_document_bytes")
    big = base64.b64encode(HTML * 2).decode()
    resp = (await app.asgi_client.post("/v1/documents/convert",
                                       json={"model": "docling", "file": big}))[1]
    assert_400(resp, "file", "max_document_bytes")


# ------------------------------------------------------------------ engine and store

def test_engine_stops_at_the_next_page_when_cancelled():
    from hypnos.engines.docling_convert import DoclingConverter
    engine = DoclingConverter()
    engine.load(LoadSpec(model_id="docling", weights_path=None))
    doc = engine.open(DocumentRequest(data=make_pdf(), filename="d.pdf"))
    cancel = threading.Event()
    done = engine.convert_pages(doc, lambda page: cancel.set(), cancel)
    assert doc.pages == [1, 2] and [p.page for p in done] == [1]


# Run in a process of its own: the modules a step imports are only new in a process where no
# other test has converted a document yet.
FIRST_USE = """
import json, sys, threading
from hypnos.engines import docling_convert
from hypnos.engines.records import DocumentRequest, LoadSpec

def imported(step):
    before = set(sys.modules)
    step()
    return sorted(set(sys.modules) - before)

def convert():
    doc = engine.open(DocumentRequest(data=open(sys.argv[2], "rb").read(), filename="a.pdf"))
    engine.convert_pages(doc, lambda _page: None, threading.Event())

engine = docling_convert.DoclingConverter()
out = {"prepare": imported(docling_convert.prepare) if sys.argv[1] == "prepare" else []}
out["load"] = imported(lambda: engine.load(LoadSpec(model_id="docling", weights_path=None)))
out["convert"] = imported(convert)
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.parametrize("first", ["load", "prepare"])
def test_the_first_conversion_imports_nothing_of_docling(first, tmp_path):
    """Regression: the first conversion after the server started held the event loop for
    0.4-0.6 s (no answer to /health meanwhile). Importing docling's packages holds the GIL in
    long stretches even in a worker thread (C extensions initialising), and that import came
    with a request: the model's load on its first use, then docling's own first-use imports
    (its serialisers, pdfium) inside the conversion. Now ``load`` converts a blank page, so a
    conversion imports nothing of the packages the load brought in; and ``prepare`` (run by
    start-up staging) leaves a later load and conversion nothing of its packages to import."""
    pdf = tmp_path / "a.pdf"
    pdf.write_bytes(make_pdf())
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = subprocess.run([sys.executable, "-c", FIRST_USE, first, str(pdf)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = json.loads(done.stdout.strip().splitlines()[-1])
    # PIL is left out: its file-format plugins load on the first picture, a few small modules.
    heavy = {name.partition(".")[0] for name in steps[first]} - {"PIL"}
    assert {"docling", "docling_core"} <= heavy
    later = steps["convert"] + (steps["load"] if first == "prepare" else [])
    assert [name for name in later if name.partition(".")[0] in heavy] == []


def _pic(size: int) -> DocumentPicture:
    return DocumentPicture(page=1, mime="image/png", data=b"x" * size)


def test_picture_store_ttl_and_oldest_first_eviction():
    now = [1000.0]
    store = PictureStore(ttl_secs=60, max_bytes=100, clock=lambda: now[0])
    a = store.create()
    assert store.add(a, [_pic(40), _pic(10)]) == [1, 2]
    b = store.create()
    assert store.add(b, [_pic(40)]) == [1]
    c = store.create()
    store.add(c, [_pic(30)])                 # 120 > 100: the oldest (a) goes
    assert store.get(a.id) is None and store.get(b.id) is b and store.used_bytes == 70
    with pytest.raises(PicturesTooLarge):
        store.add(store.create(), [_pic(101)])
    now[0] += 59
    assert store.get(c.id) is c
    now[0] += 1
    assert store.get(b.id) is None and store.get(c.id) is None and store.used_bytes == 0


async def test_pictures_expire_through_the_routes():
    app = app_for(document_pictures_ttl_secs=0)
    body = (await post_file(app, make_docx(), "r.docx", return_pictures=True)).json
    resp = (await app.asgi_client.get(f"/v1/documents/{body['id']}/pictures"))[1]
    assert resp.status == 404 and resp.json["error"]["type"] == "not_found"


# ------------------------------------------------------------------ joined markdown

def test_join_mends_a_table_split_by_a_page_break():
    p1 = "Intro.\n\n| a | b |\n|---|---|\n| 1 | 2 |"
    p2 = "| a | b |\n|---|---|\n| 3 | 4 |\n\nAfter."
    assert join_pages([p1, p2]) == "Intro.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n\nAfter."
    p3 = "| 5 | 6 |\n|---|---|\n| 7 | 8 |"     # the continuation's first row became a header
    assert join_pages([p1, p3]).endswith("| 1 | 2 |\n| 5 | 6 |\n| 7 | 8 |")


def test_join_continues_numbered_lists_and_sentences():
    assert join_pages(["Steps:\n\n1. one\n2. two", "1. three\n2. four\n\nDone."]) == \
        "Steps:\n\n1. one\n2. two\n3. three\n4. four\n\nDone."
    assert join_pages(["The cat sat on", "the mat."]) == "The cat sat on the mat."
    assert join_pages(["A word is hyphen-", "ated here."]) == "A word is hyphenated here."
    assert join_pages(["# Title", "body text."]) == "# Title\n\nbody text."
    assert join_pages(["Done.", "Next page."]) == "Done.\n\nNext page."
    assert join_pages(["", "Only.", ""]) == "Only."


# ------------------------------------------------------------------ url

@pytest.fixture
def local_site():
    """An HTTP server on 127.0.0.1 serving the HTML page, a redirect to it and a 404."""
    import http.server
    import threading as th

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/docs/page.html":
                self.send_response(200)
                self.send_header("content-length", str(len(HTML)))
                self.end_headers()
                self.wfile.write(HTML)
            elif self.path == "/old":
                self.send_response(302)
                self.send_header("location", "/docs/page.html")
                self.end_headers()
            else:
                self.send_response(404)
                self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    th.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


async def convert_json(app, **body):
    _req, resp = await app.asgi_client.post("/v1/documents/convert",
                                            json={"model": "docling", **body})
    return resp


async def test_url_on_a_private_host_is_refused_by_default(local_site):
    resp = await convert_json(app_for(), url=local_site + "/docs/page.html")
    assert_400(resp, "url", "127.0.0.1")
    assert "no public address" in resp.json["error"]["message"]


async def test_url_fetch_when_private_hosts_are_allowed(local_site):
    app = app_for(allow_private_urls=True)
    resp = await convert_json(app, url=local_site + "/docs/page.html")
    assert resp.status == 200, resp.text
    assert resp.json["filename"] == "page.html" and "# Hello page" in resp.json["markdown"]
    redirected = await convert_json(app, url=local_site + "/old")
    assert redirected.status == 200 and redirected.json["filename"] == "page.html"
    assert_400(await convert_json(app, url=local_site + "/missing"), "url", "HTTP 404")
    assert_400(await convert_json(app_for(allow_private_urls=True, max_document_bytes=50),
                                  url=local_site + "/docs/page.html"), "url",
               "max_document_bytes")


async def test_url_refusals():
    assert_400(await convert_json(app_for(allow_remote_image_urls=False),
                                  url="http://example.com/a.pdf"), "url",
               "allow_remote_image_urls")
    assert_400(await convert_json(app_for(), url="ftp://example.com/a.pdf"), "url", "http(s)")
    assert_400(await convert_json(app_for(), url="http://example.com/a.pdf",
                                  file=base64.b64encode(HTML).decode()), "url", "not both")


# ------------------------------------------------------------------ describe_pictures

async def test_describe_pictures_sends_each_picture_to_the_vision_model():
    """'eyes' is a vision-modality entry over the text-only SmolLM2 GGUF (no projector, none
    is on the package index): the picture reaches its chat engine as an image_url part and
    the engine refuses it, which is what this proves. Descriptions themselves need a real
    vision model."""
    app = app_for()
    resp = await post_file(app, make_docx(), "r.docx", describe_pictures="eyes")
    assert resp.status == 500 and resp.json["error"]["type"] == "server_error"
    message = resp.json["error"]["message"]
    assert "Describing a picture of page 1 with 'eyes' failed" in message
    assert "image_url" in message
    resp = await post_file(app, make_docx(), "r.docx", describe_pictures="nope")
    assert resp.status == 404 and resp.json["error"]["type"] == "model_not_found"


async def test_describe_pictures_through_a_projector_lands_under_the_placeholder(tmp_path):
    """'eyes' here is SmolLM2 with the tiny random-weight projector of tests/tiny_mmproj.py:
    the description is noise, but it came through the real vision chat path (libmtmd) and
    stands under the picture's placeholder, which is what this proves."""
    import os
    import tomllib
    from conftest import require_smollm2
    from tiny_mmproj import write_tiny_mmproj
    os.link(require_smollm2(), tmp_path / "smol.gguf")
    write_tiny_mmproj(tmp_path / "mmproj.gguf")
    cfg = parse_config(tomllib.loads(f"""
models_dir = "{tmp_path}"
[[models]]
id = "docling"
modality = "document_conversion"
engine = "docling"
[[models]]
id = "eyes"
modality = "vision"
engine = "ggml_llama"
weights_path = "smol.gguf"
aux_path = "mmproj.gguf"
context_len = 2048
"""))
    app = create_app(cfg, catalog=load_catalog(), stage=False)
    resp = await post_file(app, make_docx(), "r.docx", describe_pictures="eyes")
    assert resp.status == 200, resp.text
    body = resp.json
    assert body["usage"]["pictures_described"] == 1
    placeholder = body["markdown"].index("<!-- image -->")
    assert body["markdown"].index("> **Picture:**") > placeholder


async def test_describe_pictures_leaves_the_vision_model_alone_without_pictures():
    app = app_for()
    body = (await post_file(app, HTML, "p.html", describe_pictures="eyes")).json
    assert body["usage"]["pictures_described"] == 0 and "# Hello page" in body["markdown"]
    assert str(app.ctx.scheduler.models["eyes"].tier) == "tier3_nvme_ssd"


def test_descriptions_go_under_their_placeholders():
    md = "Intro\n\n<!-- image -->\n\nMiddle\n\n<!-- image -->\n\nEnd"
    out = insert_descriptions(md, ["A red box.\nIt has a black border.", None])
    assert out == ("Intro\n\n<!-- image -->\n\n> **Picture:** A red box.\n> It has a black "
                   "border.\n\nMiddle\n\n<!-- image -->\n\nEnd")
