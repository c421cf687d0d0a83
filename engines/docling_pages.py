"""A converted docling document as Hypnos's records: one page's Markdown, its pictures (with
caption, box, size and, when asked, the PNG bytes), its table count and, when asked, docling's
JSON. Used by ``docling_convert`` for every pipeline and by its warm-up; docling's types are
imported at call time, as that module imports docling only in ``load``."""
from __future__ import annotations

import io

from hypnos.engines.records import ConvertedPage, DocumentPicture, DocumentRequest


def page_from(document, number: int, req: DocumentRequest) -> ConvertedPage:
    """Page ``number`` of docling ``document`` as a ``ConvertedPage``, per ``req``'s wants."""
    from docling_core.types.doc import PictureItem, TableItem
    pictures, tables = [], 0
    for item, _level in document.iterate_items():
        if isinstance(item, TableItem):
            tables += 1
        elif isinstance(item, PictureItem):
            pictures.append(picture(document, item, number, req.want_pictures))
    return ConvertedPage(page=number, markdown=document.export_to_markdown(),
                         pictures=pictures, tables=tables,
                         json=document.export_to_dict() if req.want_json else None)


def picture(document, item, page: int, want_bytes: bool) -> DocumentPicture:
    """A docling ``PictureItem`` as a ``DocumentPicture`` (its PNG only with ``want_bytes``)."""
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
