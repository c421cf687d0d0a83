"""Prompt lookup around an edit and at a message's end (``copy_trail.CopyTrail``, the
control-token cut in ``drafts.NgramDrafter``): pure, token lists in, drafts out, each step
verified as the decode loop verifies it (the drafted tokens the answer agrees with, then the
answer's own)."""
from __future__ import annotations

from hypnos.engines.llama.speculative import copy_trail
from hypnos.engines.llama.speculative.drafts import NgramDrafter

FILE = list(range(100, 140))            # the text the answer returns, edited
END = 7                                  # a control token: the message ends


def decode(drafter: NgramDrafter, prompt: list[int], answer: list[int]):
    """``answer`` written after ``prompt`` with ``drafter``'s drafts checked as the decode
    loop checks them: each step's (draft, tokens accepted, sort, where it stood)."""
    context, steps = list(prompt), []
    while len(context) < len(prompt) + len(answer):
        at = len(context) - len(prompt)
        draft = drafter.propose(context, 64)
        kept = 0
        while (kept < len(draft) and at + kept < len(answer)
               and draft[kept] == answer[at + kept]):
            kept += 1
        sort = drafter.sort
        drafter.on_accept(len(draft), kept)
        steps.append((draft, kept, sort, at))
        context += answer[at:at + kept + 1]
    return steps


def prompt_with(text: list[int]) -> list[int]:
    return [1, 2, 3] + text + [END, 4, 5]


def test_a_copy_left_at_an_edit_goes_on_past_the_replaced_token():
    """The answer copies the file, writes 999 where it had 120, and copies on: the step
    after the edit drafts the file past 120, though no 5 tokens in a row match there."""
    answer = FILE[:20] + [999] + FILE[21:]
    steps = decode(NgramDrafter(prompt_len=len(prompt_with(FILE))), prompt_with(FILE), answer)
    after = next(s for s in steps if s[3] == 21)
    assert after[2] == "edited"
    assert after[0][:3] == FILE[21:24] and after[1] == len(after[0])
    # Without the trail the step would have been plain (the last 5 tokens end in 999).
    assert NgramDrafter(prompt_len=0).propose(prompt_with(FILE) + answer[:21], 64) == []


def test_a_longer_replacement_is_found_again_a_little_further():
    """Two tokens written for one: the guess past the replaced token is refused, and once
    the answer's last token stands a little further in the file, what follows it there is
    drafted."""
    answer = FILE[:20] + [998, 999] + FILE[21:]
    steps = decode(NgramDrafter(prompt_len=len(prompt_with(FILE))), prompt_with(FILE), answer)
    edited = [s for s in steps if s[2] == "edited"]
    assert edited[0][3] == 21 and edited[0][1] == 0           # 121... refused: 999 came
    assert any(s[3] == 23 and s[0][:2] == FILE[22:24] and s[1] >= 2 for s in edited)


def test_prose_that_leaves_a_short_copy_is_no_edit():
    """A copy that held for fewer than HELD_MIN tokens is a phrase the answer shared with
    its context, not a text it returns: leaving it drafts nothing."""
    phrase = [200, 201, 202, 203, 204]
    prompt = [1] + phrase + [205, 206, 207, 208, 209] + [2]
    answer = phrase + [205, 300, 301, 302, 303, 304]
    steps = decode(NgramDrafter(prompt_len=len(prompt)), prompt, answer)
    assert copy_trail.HELD_MIN > 1
    assert all(s[2] != "edited" for s in steps)


def test_a_long_match_wins_over_the_trail():
    """Where the answer's last tokens match 10 or more tokens elsewhere (here the edited
    line, quoted in the instruction), that copy was found again and is drafted; a 9-token
    match is not enough, and the trail's guess is drafted."""
    answer = FILE[:20] + [999] + [60, 61, 62, 63, 64, 65]
    for quoted, sort in ((FILE[11:20], ""), (FILE[12:20], "edited")):
        prompt = prompt_with(FILE)[:-2] + quoted + [999, 60, 61, 62, 63, 64, 65] + [4, 5]
        steps = decode(NgramDrafter(prompt_len=len(prompt)), prompt, answer)
        after = next(s for s in steps if s[3] == 21)
        assert after[2] == sort
        assert after[0][:4] == ([60, 61, 62, 63] if sort == "" else FILE[21:25])


def test_no_draft_crosses_a_control_token():
    """A copy of the prompt's last message stops where the message did: the chat template's
    end and the next role are never drafted."""
    prompt = prompt_with(FILE)
    context = prompt + FILE[34:]                          # the answer reached the file's end
    d = NgramDrafter(prompt_len=len(prompt), controls=frozenset({END}))
    assert d.propose(context, 64) == []                   # the next token is END: nothing
    context = prompt + FILE[30:35]
    draft = NgramDrafter(prompt_len=len(prompt), controls=frozenset({END})).propose(context, 64)
    assert draft and END not in draft and draft == FILE[35:35 + len(draft)]
    free = NgramDrafter(prompt_len=len(prompt)).propose(prompt + FILE[34:], 64)
    assert END in free                                    # without the set, it would


def test_a_copy_that_reached_its_messages_end_is_no_edit():
    """The answer copied the whole file, then closed with its own token where the prompt's
    message ended (a control token): nothing is drafted past the message's end."""
    prompt = prompt_with(FILE)
    answer = FILE + [900, 901]                            # e.g. a closing fence, then more
    steps = decode(NgramDrafter(prompt_len=len(prompt), controls=frozenset({END})), prompt,
                   answer)
    assert all(s[2] != "edited" for s in steps)
    assert all(END not in s[0] and 4 not in s[0] for s in steps)


def test_control_tokens_are_read_once_per_weights_file(tmp_path):
    """A model swapped back in does not walk its vocabulary again: the control tokens are
    kept by weights file, and a file that changed is read anew. (llama.cpp's two calls
    stand in here as a vocabulary of 10 tokens, 3 of them control tokens.)"""
    from hypnos.engines.llama.speculative import vocabulary

    class Vocab:
        calls = 0

        def llama_vocab_n_tokens(self, vocab):
            return 10

        def llama_vocab_is_control(self, vocab, token):
            self.calls += 1
            return token in (0, 7, 9)

    ll, weights = Vocab(), tmp_path / "m.gguf"
    weights.write_bytes(b"one")
    assert vocabulary.control_tokens(ll, None, weights) == {0, 7, 9}
    assert vocabulary.control_tokens(ll, None, weights) == {0, 7, 9}
    assert ll.calls == 10
    weights.write_bytes(b"other weights")               # another size: read again
    vocabulary.control_tokens(ll, None, weights)
    assert ll.calls == 20
    vocabulary.control_tokens(ll, None)                 # no file: never kept
    vocabulary.control_tokens(ll, None)
    assert ll.calls == 40
