"""Where a spoken answer's first phrase ends (engines/phrase_breaks.py). Pure."""
from hypnos.engines.phrase_breaks import FIRST_WORDS, first_break


def head_tail(text: str, min_words: int = FIRST_WORDS) -> tuple[str, str] | None:
    cut = first_break(text, min_words)
    return None if cut is None else (text[:cut[0]], text[cut[1]:])


def test_a_phrase_ends_before_a_word_that_opens_one():
    assert head_tail("Paris is a historical city located in the Balkans.") == (
        "Paris is a historical city", "located in the Balkans.")
    assert head_tail("It is a large city in northern France.") == (
        "It is a large city", "in northern France.")
    assert head_tail("We stayed home all day because it rained.") == (
        "We stayed home all day", "because it rained.")


def test_or_at_a_clause_mark_whichever_comes_first():
    assert head_tail("Paris in spring is lovely, truly lovely.") == (
        "Paris in spring is lovely,", "truly lovely.")
    assert head_tail("One two three four; five six.") == ("One two three four;", "five six.")


def test_not_before_words_that_sit_inside_a_phrase():
    for text in ("Paris is the capital of France.", "She wants very much to go home.",
                 "Paris is old and big and very grey.", "It holds 1,000 people or more."):
        assert head_tail(text) is None, text


def test_at_least_first_words_before_the_break():
    assert head_tail("Life in Paris, they say, is good.") == (
        "Life in Paris, they say,", "is good.")
    assert head_tail("Life in Paris, they say.", min_words=1) == ("Life", "in Paris, they say.")


def test_a_word_still_being_written_is_not_a_break_yet():
    assert head_tail("It is a large city in") is None                # "in" may grow
    assert head_tail("It is a large city inside the walls.") is None   # not "in"
    assert head_tail("It is a large city in ") == ("It is a large city", "in ")


def test_text_without_spaces_is_never_cut_before_a_word():
    assert head_tail("こんにちは、元気ですか。") is None               # one "word" before the mark


def test_long_runs_of_spaces_or_marks_are_read_once():
    """A break is found (or not) in text made of long runs, which a search that went back
    over each run would take minutes on."""
    assert head_tail("one two three four" + " " * 100_000 + "in it.") == (
        "one two three four", "in it.")
    assert head_tail("あ、" * 100_000) is None
    assert head_tail("one, two, three, four, five") == ("one, two, three, four,", "five")
