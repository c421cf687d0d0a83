"""The picture store of converted documents (spec 12, "Pictures of a converted document").

A conversion with ``return_pictures`` opens a document here; its pictures are added page by
page. A document lives until its TTL (server.document_pictures_ttl_secs) or an explicit
delete; when the bytes held would pass the cap (server.document_pictures_max_bytes) the
oldest documents go first. In process memory; lost on restart. Used from the event loop
only, so it needs no lock.
"""
from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, UTC
from collections.abc import Callable

from hypnos.engines.records import DocumentPicture


class PicturesTooLarge(ValueError):
    """One document's pictures alone pass the store's cap."""


@dataclass
class StoredDocument:
    id: str
    expires_at: float                       # unix seconds
    pictures: list[DocumentPicture] = field(default_factory=list)
    bytes: int = 0

    @property
    def expires_iso(self) -> str:
        return iso_time(self.expires_at)


def iso_time(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PictureStore:
    def __init__(self, ttl_secs: int, max_bytes: int,
                 clock: Callable[[], float] = time.time):
        self.ttl_secs = ttl_secs
        self.max_bytes = max_bytes
        self.clock = clock
        self._docs: OrderedDict[str, StoredDocument] = OrderedDict()   # oldest first

    @property
    def used_bytes(self) -> int:
        return sum(d.bytes for d in self._docs.values())

    def create(self) -> StoredDocument:
        self._expire()
        doc = StoredDocument("doc-" + secrets.token_hex(16), self.clock() + self.ttl_secs)
        self._docs[doc.id] = doc
        return doc

    def add(self, doc: StoredDocument, pictures: list[DocumentPicture]) -> list[int]:
        """Append ``pictures`` to ``doc``; returns their 1-based indexes. Evicts the oldest
        other documents while the store would pass its cap; raises PicturesTooLarge (and
        drops ``doc``) when ``doc`` alone would."""
        size = sum(len(p.data or b"") for p in pictures)
        if doc.bytes + size > self.max_bytes:
            self._docs.pop(doc.id, None)
            raise PicturesTooLarge(
                f"the document's pictures take more than document_pictures_max_bytes "
                f"({self.max_bytes})")
        while self.used_bytes + size > self.max_bytes:
            oldest = next(k for k in self._docs if k != doc.id)
            del self._docs[oldest]
        first = len(doc.pictures) + 1
        doc.pictures.extend(pictures)
        doc.bytes += size
        return list(range(first, first + len(pictures)))

    def get(self, doc_id: str) -> StoredDocument | None:
        self._expire()
        return self._docs.get(doc_id)

    def delete(self, doc_id: str) -> bool:
        self._expire()
        return self._docs.pop(doc_id, None) is not None

    def _expire(self) -> None:
        now = self.clock()
        for key in [k for k, d in self._docs.items() if d.expires_at <= now]:
            del self._docs[key]
