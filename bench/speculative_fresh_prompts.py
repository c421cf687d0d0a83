"""The fresh prompt set of ``speculative.py --fresh`` (issue #39).

Written fresh for issue #39, before any tuning commit, to judge whether ``speculative =
"auto"`` may become the default for chat models; unrelated to ``speculative_prompts.py``, on
which the n-gram sizes were tuned. It must not be edited to fit results: a prompt found
wanting is replaced only by a new set, committed before the tuning it judges, and said so.

Two families, seven kinds, six prompts a kind:

  plain    answers that copy nothing from what was said before
           free_text    stories, letters, a poem, a dialogue
           explanation  how or why something works
           plan         numbered steps towards a goal
  copying  answers that repeat text already seen
           edit         a file with one or two values changed, returned whole (the first
                        two answers about 60 tokens: a TOML and a JSON config)
           refactor     a function renamed or restructured, returned whole
           structured   data given in the prompt, returned as JSON, CSV or a table
           again        a question asked a second time in a new conversation: the bench
                        asks it once unmeasured, then measures the second ask

The split, fixed: within each kind, in written order, the 1st, 3rd and 5th prompts (even
positions counting from 0) are ``tune``; the 2nd, 4th and 6th (odd positions) are ``held``:
held back from tuning and reported separately. Answers are meant to be 60-300 tokens long
for Qwen2.5-Coder-0.5B-Instruct.
"""
from __future__ import annotations

from dataclasses import dataclass

from hypnos.bench.speculative_fresh_code import EDIT, REFACTOR

FAMILIES: dict[str, tuple[str, ...]] = {
    "plain": ("free_text", "explanation", "plan"),
    "copying": ("edit", "refactor", "structured", "again"),
}
HALVES = ("tune", "held")


@dataclass(frozen=True)
class FreshPrompt:
    """One prompt: ``name`` unique in the set (``kind/slug``), its ``family``, ``kind`` and
    ``half``, and ``ask``, the one user message (for ``again``, the question asked twice)."""
    name: str
    family: str
    kind: str
    half: str
    ask: str


def half_of(position: int) -> str:
    """The half of the prompt at ``position`` (from 0) in its kind's written order."""
    return HALVES[position % 2]


FREE_TEXT: list[tuple[str, str]] = [
    ("tram-driver", "Write a story of about 150 words about a retired tram driver who teaches "
                    "a girl next door to repair old clocks."),
    ("thank-you-letter", "Write a friendly letter of about 120 words to a neighbour, thanking "
                         "them for watering your plants while you were away."),
    ("night-bus-poem", "Write a poem of four short stanzas about a city bus at night."),
    ("teapot-copy", "Write a product description of about 120 words for a handmade ceramic "
                    "teapot glazed in deep green."),
    ("astronaut-dialogue", "Write a short dialogue between a tired astronaut and a ground "
                           "controller during a long night shift."),
    ("first-day-diary", "Write a diary entry of about 150 words by a student on the first day "
                        "at a new school in a foreign country."),
]

EXPLANATION: list[tuple[str, str]] = [
    ("hash-collisions", "Explain how a hash table handles collisions, in about 150 words."),
    ("blue-sky", "Explain why the sky is blue to a curious twelve-year-old."),
    ("database-index", "Explain what a database index is, and when one slows things down."),
    ("vaccines", "Explain in two short paragraphs how vaccines train the immune system."),
    ("process-thread", "Explain the difference between a process and a thread in an "
                       "operating system."),
    ("compound-interest", "Explain how compound interest works, with a small worked example "
                          "in words."),
]

PLAN: list[tuple[str, str]] = [
    ("managed-database", "Plan, in seven numbered steps, how a small team should move a web "
                         "app's self-hosted PostgreSQL to a managed cloud database."),
    ("spanish-weeks", "Make a twelve-week plan for learning conversational Spanish with 30 "
                      "minutes a day, one short line per week."),
    ("clean-up-day", "Outline a plan for a neighbourhood clean-up day: the preparation, the "
                     "day itself and the follow-up."),
    ("app-release", "Write a release plan for version 2.0 of a mobile banking app, from "
                    "feature freeze to launch, as a numbered list."),
    ("cloud-bill", "Plan how a startup can cut its cloud bill by a third over the next "
                   "quarter, as a list of concrete steps."),
    ("hiking-trip", "Plan a three-day hiking trip for two beginners in a national park: "
                    "gear, each day's route and safety."),
]

STRUCTURED: list[tuple[str, str]] = [
    ("people-json", '''\
Turn these notes into a JSON array of objects with the keys "name", "city", "joined" (the \
year, a number) and "role". Reply with the JSON only.

Amara Okafor joined in 2019 and works in Lagos as a data engineer. Tomasz Nowak, a product \
designer, has been in Krakow since joining in 2021. Lucia Fernandez joined in 2017; she is a \
support lead in Montevideo. Kenji Watanabe, site reliability engineer, Osaka, joined 2022. \
Ingrid Solberg joined in 2020 as a technical writer based in Bergen.'''),
    ("logs-csv", '''\
Convert these log lines to CSV with the header time,level,service,message. Reply with the \
CSV only.

2024-05-02T09:14:03Z WARN payments retry 2 of 5 for charge ch_81
2024-05-02T09:14:07Z INFO payments charge ch_81 settled
2024-05-02T09:15:22Z ERROR mailer smtp timeout after 30s
2024-05-02T09:15:40Z INFO mailer queue drained
2024-05-02T09:16:01Z DEBUG search index shard 3 compacted
2024-05-02T09:16:45Z WARN auth 12 failed logins from 203.0.113.7
2024-05-02T09:17:10Z INFO auth lockout lifted for user 4471'''),
    ("laptops-table", '''\
Make a Markdown table with the columns Model, Weight, Battery and Price from this text.

The Aero 14 weighs 1.2 kg, lasts 11 hours on battery and costs 1,099 EUR. The Brick 16 is \
2.4 kg, runs 6 hours and costs 1,549 EUR. The Linea 13 weighs 0.98 kg, gives 14 hours and \
sells for 1,299 EUR. The Tundra 15: 1.9 kg, 9 hours, 899 EUR.'''),
    ("meeting-json", '''\
From these meeting notes, make a JSON object with "date", "attendees" (a list), "decisions" \
(a list of strings) and "action_items" (a list of objects with "owner", "task" and "due"). \
Use the notes' own wording. Reply with the JSON only.

Meeting of 14 March 2025. Present: Priya, Marco, Helen, Dmitri. Decided: the beta opens to \
500 users on 1 April; the old export API is retired at the end of June. Actions: Priya \
drafts the beta invitation by 20 March; Marco moves the export clients to the v2 endpoint \
by 15 May; Helen books the usability sessions by 25 March.'''),
    ("yaml-to-json", '''\
Convert this YAML to JSON. Reply with the JSON only.

service: inventory
version: 3.4.1
replicas: 3
env:
  DB_HOST: db.internal
  DB_POOL: 20
  FEATURE_FLAGS: "fast-sync,bulk-import"
ports:
  - 8080
  - 9090
healthcheck:
  path: /healthz
  interval_s: 15
  timeout_s: 3'''),
    ("timetable-csv", '''\
Make a CSV with the columns day,start,end,course,room from this timetable, one row per class.

Monday: Linear Algebra 08:30-10:00 in B12, Organic Chemistry 10:15-11:45 in Lab 3. Tuesday: \
Medieval History 09:00-10:30 in A4. Wednesday: Linear Algebra 08:30-10:00 in B12, Statistics \
13:00-14:30 in C7. Thursday: Organic Chemistry 10:15-11:45 in Lab 3, Statistics 15:00-16:30 \
in C7. Friday: Medieval History 09:00-10:30 in A4.'''),
]

AGAIN: list[tuple[str, str]] = [
    ("palindrome-function", "Write a Python function `is_palindrome(text)` that ignores case, "
                            "spaces and punctuation, with a docstring and two doctest "
                            "examples."),
    ("tcp-udp", "In three short paragraphs, explain the difference between TCP and UDP and "
                "when to use each."),
    ("orders-sql", "Write a SQL query that returns, for each customer, the number of orders "
                   "and the total spent in 2023, from the tables customers(id, name) and "
                   "orders(id, customer_id, placed_at, total), highest total first."),
    ("review-checklist", "Give me a checklist of eight items for reviewing a pull request, "
                         "one line each."),
    ("debounce-js", "Write a JavaScript function `debounce(fn, waitMs)` with comments that "
                    "explain each part."),
    ("bloom-filter", "What is a Bloom filter? Describe how it works and one place it is "
                     "used, in under 150 words."),
]

KINDS: dict[str, list[tuple[str, str]]] = {
    "free_text": FREE_TEXT, "explanation": EXPLANATION, "plan": PLAN,
    "edit": EDIT, "refactor": REFACTOR, "structured": STRUCTURED, "again": AGAIN,
}


def fresh_prompts() -> list[FreshPrompt]:
    """Every prompt, kind by kind (``FAMILIES``' order), each kind in its written order."""
    return [FreshPrompt(f"{kind}/{slug}", family, kind, half_of(i), ask)
            for family, kinds in FAMILIES.items() for kind in kinds
            for i, (slug, ask) in enumerate(KINDS[kind])]


PROMPTS: list[FreshPrompt] = fresh_prompts()
