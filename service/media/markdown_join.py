"""Join per-page Markdown into one document, mending what a page break cut (spec 12):
a table continued on the next page, a numbered list whose numbering restarts, a sentence
split in the middle. Pure functions over strings."""
from __future__ import annotations

import re

_NUMBERED = re.compile(r"^(\s*)(\d+)\.\s")
_SEPARATOR = re.compile(r"^\|?\s*:?-{3,}")
_SENTENCE_END = (".", "!", "?", ":", ";", '"', "'", ")", "]", "*", "`", ">")


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def _mend_table(prev: list[str], nxt: list[str]) -> list[str] | None:
    """The next page's lines with a repeated header dropped, when both sides of the break
    are a table with the same column count; else None."""
    if not (prev and nxt and prev[-1].startswith("|") and nxt[0].startswith("|")):
        return None
    if len(_cells(prev[-1])) != len(_cells(nxt[0])):
        return None
    if len(nxt) > 1 and _SEPARATOR.match(nxt[1]):
        header = next((ln for ln in _table_start(prev)), None)
        if header is not None and _cells(header) == _cells(nxt[0]):
            return nxt[2:]             # the header was repeated: drop it and its separator
        return [nxt[0]] + nxt[2:]      # the first row became a header: keep it as a row
    return nxt


def _table_start(lines: list[str]) -> list[str]:
    """The first line of the table the lines end with."""
    i = len(lines) - 1
    while i > 0 and lines[i - 1].startswith("|"):
        i -= 1
    return lines[i:i + 1]


def _renumber(prev: list[str], nxt: list[str]) -> list[str] | None:
    """The next page's leading list renumbered to continue the previous page's, when the
    previous page ends with a numbered item and the next starts again at 1; else None."""
    last = _NUMBERED.match(prev[-1]) if prev else None
    first = _NUMBERED.match(nxt[0]) if nxt else None
    if not (last and first and first.group(2) == "1" and last.group(1) == first.group(1)):
        return None
    number, out, indent = int(last.group(2)), [], last.group(1)
    for i, line in enumerate(nxt):
        m = _NUMBERED.match(line)
        if m is None or m.group(1) != indent:
            return out + nxt[i:]
        number += 1
        out.append(f"{indent}{number}. {line[m.end():]}")
    return out


def _splits_sentence(prev: str, nxt: str) -> bool:
    tail, head = prev.rstrip(), nxt.lstrip()
    if not tail or not head or tail.endswith(_SENTENCE_END) or not head[0].islower():
        return False
    last_line = tail.splitlines()[-1]
    return not last_line.startswith(("#", "|", "- ", "* ", "<!--")) \
        and not _NUMBERED.match(last_line)


def join_pages(pages: list[str]) -> str:
    """The pages' Markdown joined with blank lines, mending tables, numbered lists and
    sentences cut by a page break."""
    out = ""
    for page in pages:
        page = page.strip("\n")
        if not page:
            continue
        if not out:
            out = page
            continue
        prev_lines, next_lines = out.split("\n"), page.split("\n")
        table = _mend_table(prev_lines, next_lines)
        if table is not None:
            out = "\n".join(prev_lines + table) if table else out
            continue
        listed = _renumber(prev_lines, next_lines)
        if listed is not None:
            out = "\n".join(prev_lines + listed)
            continue
        if _splits_sentence(out, page):
            if out.endswith("-") and not out.endswith(" -"):
                out = out[:-1] + page.lstrip()     # a hyphenated word cut at the break
            else:
                out = out.rstrip() + " " + page.lstrip()
            continue
        out = out + "\n\n" + page
    return out
