"""Where spoken text's first phrase may end, so a voice starts before the whole first sentence
is written and synthesised. Pure; used by Kokoro's phrase splitter (`engines.kokoro`) and by
the realtime answer's sentence splitter (`service.wire.sentences`), so both cut alike.

A phrase may end at a clause mark (``,`` ``;`` ``:`` followed by white space, or their CJK
forms), or just before a word that opens a new phrase in English: a preposition, a
subordinating conjunction, a relative pronoun, or a participle that starts a reduced clause
("a city | located in France"). Speakers pause there, and phrase-break prediction in
text-to-speech has long placed breaks at such function words after content words. Words that
usually sit inside a noun phrase or a verb's chain ("of", "to", "and", "or", "the") are not
breaks: "the capital | of France" would be heard as two statements.

The first phrase ends at the first break that has at least ``FIRST_WORDS`` words before it.
Kokoro's time grows with the words it speaks (on a 2-core CPU about 0.55 s for three words,
0.77 s for six, 1.26 s for eleven), and so does the time the chat model takes to write them,
so each word the first phrase sheds is heard sooner.

A break before a word is known only once that word is followed by white space: a stream may
still be writing it ("in" could become "inside").
"""
from __future__ import annotations

import re

FIRST_WORDS = 4

# Words a new phrase starts with: prepositions, subordinators, relatives, and participles
# that open a reduced relative clause.
OPENERS = (
    "about", "across", "after", "along", "although", "among", "around", "as", "at",
    "because", "before", "behind", "between", "but", "by", "during", "for", "from", "if",
    "in", "including", "into", "known", "like", "located", "near", "on", "since", "situated",
    "so", "such", "that", "though", "through", "unless", "until", "where", "whereas",
    "which", "while", "who", "whose", "with", "within", "without",
)
# A clause mark (head ends after it, tail starts after the space), or the space before an
# opener (head ends before the space, tail starts at the word).
# A run of white space is tried from its start only, so a long one costs its length once.
_BREAK = re.compile(r"(?P<mark>[,;:](?=\s)|[、，；：])\s*"
                    r"|(?<!\s)\s+(?=(?:" + "|".join(OPENERS) + r")\s)")
_WORD_START = re.compile(r"(?<!\S)\S")


def first_break(text: str, min_words: int = FIRST_WORDS) -> tuple[int, int] | None:
    """``(head_end, tail_start)`` of the first break in ``text`` with at least ``min_words``
    words before it, or None: ``text[:head_end]`` is the first phrase, ``text[tail_start:]``
    the rest. Linear in ``text``: the words are counted once, as the breaks go by."""
    words, counted = 0, 0
    for m in _BREAK.finditer(text):
        head_end = m.end("mark") if m.group("mark") else m.start()
        words += sum(1 for _ in _WORD_START.finditer(text, counted, head_end))
        counted = head_end
        if words >= min_words:
            return head_end, m.end()
    return None
