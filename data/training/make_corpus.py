#!/usr/bin/env python
"""Generate data/training/corpus.jsonl: a small, labelled web-like corpus for the Data chapter.

Deterministic (``random.Random(SEED)``; no downloads, no clock): running it again writes the same
bytes, which tests/training/test_corpus_generator.py checks. Every document is synthetic English
made by a small grammar below, so no third-party text is copied.

Each line is one JSON object::

    {"id": "doc-0007", "url": "https://.../...", "text": "...",
     "truth_dup_group": "dup-03" | null,  # documents planted as near-duplicates of each other
     "truth_edit": "...",                 # how this document was made from its group's original
     "truth_quality": "good" | "<defect>"}  # the planted low-quality defect, if any

What is planted (README.md in this folder lists it too):

* ``N_UNIQUE`` good, unrelated documents (each 3-6 paragraphs, one paragraph per line);
* ``N_GROUPS`` near-duplicate groups: an original plus 1-3 variants made by the edits in
  ``VARIANT_EDITS`` (exact copy, case/whitespace changes, a changed header and footer, a few words
  substituted, one paragraph dropped or added). Their word 5-gram Jaccard similarity to the
  original is at least about 0.7;
* hard negatives: ``SITE_DOCS`` documents per site on ``len(SITES)`` sites that share a long
  boilerplate paragraph but have different bodies (Jaccard well below 0.5): not duplicates;
* low-quality documents, ``PER_DEFECT`` for each defect in ``DEFECTS``, each made to fail one
  family of heuristic filters (too short, hashtag spam, bullet lists, ellipsis teasers, repeated
  lines, repeated sentences, keyword lists without stop words, number tables, placeholder text,
  code, long unbroken tokens).

Usage: ``python data/training/make_corpus.py [--out data/training/corpus.jsonl]``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

SEED = 20261123
N_UNIQUE = 100
N_GROUPS = 20
PER_DEFECT = 4

NOUNS = """river engine market garden village bridge harbour library station farmer teacher
student council museum factory orchard bakery kitchen forest valley island mountain canal railway
bicycle tractor lighthouse meadow workshop festival concert theatre newspaper bulletin archive
recipe ferry tunnel reservoir vineyard quarry cottage castle cathedral market-hall clinic hospital
pharmacy laboratory telescope satellite network cable server battery turbine windmill glacier
desert lagoon estuary harbourmaster carpenter plumber baker miller weaver potter sculptor painter
composer novelist historian surveyor engineer architect gardener beekeeper shepherd fisherman
pilot sailor captain mayor committee charity school college campus stadium gallery bookshop
warehouse courthouse bus tram lorry scooter kayak canoe tent orchestra choir parliament senate
budget pension mortgage harvest drought flood storm avalanche earthquake volcano comet eclipse
spreadsheet database algorithm compiler protocol password keyboard printer camera microphone
lantern compass map atlas calendar ledger invoice contract treaty census survey""".split()

ADJS = """quiet busy ancient modern narrow wide muddy sunny rainy frozen crowded empty famous
forgotten local regional national rural urban coastal northern southern eastern western
wooden stone brick glass electric solar careful patient generous stubborn curious clever
cheerful anxious proud humble bright dim noisy silent fragile sturdy expensive cheap rare
common seasonal weekly annual temporary permanent public private official informal elegant
plain colourful pale heavy light slow fast steep gentle fertile dry damp remote nearby
historic experimental reliable broken restored abandoned renovated popular obscure""".split()

VERBS_PAST = """visited repaired built opened closed painted measured counted described
admired criticised photographed inspected cleaned moved replaced designed funded organised
cancelled postponed celebrated documented discovered explored mapped studied tested approved
rejected announced questioned supported protected restored expanded reduced delayed improved
delivered collected borrowed returned recorded published translated reviewed""".split()

VERBS_BASE = """visit repair build open close paint measure count describe admire photograph
inspect clean move replace design fund organise cancel postpone celebrate document discover
explore map study test approve reject announce question support protect restore expand reduce
delay improve deliver collect borrow return record publish translate review""".split()

ADVS = """slowly quickly carefully quietly suddenly gradually eventually recently finally
patiently reluctantly eagerly openly privately briefly regularly rarely usually""".split()

PREPS = "near behind beside above below across along around beyond inside outside past".split()

NAMES = """Amara Bruno Chen Dalia Emeka Fatima Gustav Hana Ivan Jonas Keiko Lucia Mateo Nadia
Oskar Priya Quentin Rosa Samir Tomas Uma Viktor Wen Yusuf Zofia""".split()

PLACES = """Eastbrook Millford Harrowgate Pinecrest Stonehaven Willowmere Ashby Redcliff
Larkspur Oakhollow Brightwater Fernvale Kingsmoor Saltmarsh Thornbury""".split()

TIMES = """last spring|after the long winter|during the summer holidays|early on Monday
morning|before the autumn fair|at the end of the season|two years ago|over the weekend|in the
late evening|since the new year""".replace("\n", " ").split("|")

CONNECTORS = ["but", "so", "and", "while", "although", "because"]

WORTH = """important useful difficult easy expensive pleasant risky surprising""".split()

# Boilerplate that every page of one site carries (hard negatives share it).
SITES = {
    "valleygazette.example": (
        "The Valley Gazette is an independent newspaper for the people of the valley and has "
        "been published every week since the old printing press was restored by volunteers. "
        "Letters to the editor are welcome and may be shortened for reasons of space, and "
        "every correction is printed on the second page of the next edition. Subscriptions "
        "help us to pay our reporters and to keep the archive open to every reader."),
    "makersforum.example": (
        "Makers Forum is a community of people who like to build and repair things with their "
        "own hands. Please be kind to new members, search the archive before you ask a "
        "question, and share the measurements and photographs of your project so that others "
        "can learn from it. Moderators remove advertising and posts that have nothing to do "
        "with making."),
}
SITE_DOCS = 4

HEADERS = ["Posted on {d} by {n}", "Updated {d} | {n}", "{n} wrote on {d}"]
FOOTERS = ["Share this story with your friends.", "Comments are closed for this article.",
           "Filed under local news and community life."]

DEFECTS = ["too_short", "hashtag_spam", "bullet_list", "ellipsis_teasers", "repeated_lines",
           "repeated_sentences", "keyword_list", "number_table", "lorem_ipsum", "code",
           "long_tokens"]


def article(rng: random.Random) -> str:
    """'the' or 'a'/'an' (the latter before nouns that start with a vowel)."""
    return rng.choice(["the", "the", "a"])


def noun_phrase(rng: random.Random, adj_p: float = 0.5) -> str:
    """A determiner, an optional adjective and a noun, with a/an agreement."""
    words = []
    if rng.random() < adj_p:
        words.append(rng.choice(ADJS))
    words.append(rng.choice(NOUNS))
    det = article(rng)
    if det == "a" and words[0][0] in "aeiou":
        det = "an"
    return " ".join([det, *words])


def sentence(rng: random.Random) -> str:
    """One grammatical (if odd) English sentence from one of eight templates."""
    np_ = lambda p=0.5: noun_phrase(rng, p)  # noqa: E731 - short local helper
    t = rng.randrange(8)
    if t == 0:
        s = f"{np_()} {rng.choice(VERBS_PAST)} {np_()} {rng.choice(PREPS)} {np_(0.7)}"
    elif t == 1:
        s = (f"{rng.choice(NAMES)} said that {np_()} would {rng.choice(VERBS_BASE)} "
             f"{np_()} {rng.choice(TIMES)}")
    elif t == 2:
        s = (f"{rng.choice(TIMES)}, the people of {rng.choice(PLACES)} {rng.choice(VERBS_PAST)} "
             f"{np_()} and {rng.choice(VERBS_PAST)} {np_(0.8)}")
    elif t == 3:
        s = (f"it is {rng.choice(WORTH)} to {rng.choice(VERBS_BASE)} {np_()} "
             f"{rng.choice(ADVS)} when {np_()} is {rng.choice(ADJS)}")
    elif t == 4:
        s = (f"{rng.randint(2, 90)} volunteers {rng.choice(VERBS_PAST)} {np_()} "
             f"{rng.choice(ADVS)}, {rng.choice(CONNECTORS)} {np_()} was still {rng.choice(ADJS)}")
    elif t == 5:
        s = (f"according to {rng.choice(NAMES)}, {np_()} {rng.choice(PREPS)} {np_()} "
             f"has been {rng.choice(VERBS_PAST)} {rng.choice(ADVS)}")
    elif t == 6:
        q = (f"why did {rng.choice(NAMES)} {rng.choice(VERBS_BASE)} {np_()} "
             f"{rng.choice(PREPS)} {np_()} in {rng.choice(PLACES)}")
        return q[0].upper() + q[1:] + "?"
    else:
        s = (f"{np_()} of {rng.choice(PLACES)} was {rng.choice(VERBS_PAST)} with {np_()} "
             f"{rng.choice(TIMES)}, {rng.choice(CONNECTORS)} nobody {rng.choice(VERBS_PAST)} "
             f"{np_()}")
    return s[0].upper() + s[1:] + "."


def paragraph(rng: random.Random, n_sentences: int) -> str:
    return " ".join(sentence(rng) for _ in range(n_sentences))


def good_paragraphs(rng: random.Random) -> list[str]:
    return [paragraph(rng, rng.randint(2, 4)) for _ in range(rng.randint(3, 6))]


def header_footer(rng: random.Random) -> tuple[str, str]:
    date = f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    head = rng.choice(HEADERS).format(d=date, n=rng.choice(NAMES))
    return head, rng.choice(FOOTERS)


def substitute_words(rng: random.Random, text: str, fraction: float) -> str:
    """Replace ``fraction`` of the words of ``text`` by words from the lexicon (keeps lines)."""
    lines = [line.split(" ") for line in text.split("\n")]
    positions = [(i, j) for i, ws in enumerate(lines) for j in range(len(ws))]
    for i, j in rng.sample(positions, max(1, round(fraction * len(positions)))):
        lines[i][j] = rng.choice(ADJS + NOUNS)
    return "\n".join(" ".join(ws) for ws in lines)


# Variant edits: name -> function(rng, header, paragraphs, footer) -> text.
def _join(head: str, paras: list[str], foot: str) -> str:
    return "\n".join([head, *paras, foot])


VARIANT_EDITS = {
    "exact copy": lambda rng, h, p, f: _join(h, p, f),
    "case and whitespace changed": lambda rng, h, p, f: _join(
        h.upper(), [para.replace(". ", ".  ") for para in p], f.lower()),
    "header and footer changed": lambda rng, h, p, f: _join(*header_footer(rng)[:1], p,
                                                            header_footer(rng)[1]),
    "2% of words substituted": lambda rng, h, p, f: substitute_words(
        rng, _join(h, p, f), 0.02),
    "one paragraph dropped": lambda rng, h, p, f: _join(h, p[:-1], f),
    "one paragraph added": lambda rng, h, p, f: _join(h, p + [paragraph(rng, 2)], f),
}


def bad_document(rng: random.Random, defect: str) -> str:
    """A document with one planted defect (see DEFECTS)."""
    if defect == "too_short":
        return paragraph(rng, 2)
    if defect == "hashtag_spam":
        tags = " ".join("#" + rng.choice(NOUNS + ADJS) for _ in range(rng.randint(40, 60)))
        return sentence(rng) + "\n" + tags + "\n" + sentence(rng)
    if defect == "bullet_list":
        return "\n".join(f"{rng.choice(['•', '-', '*'])} {noun_phrase(rng, 0.8)} "
                         f"{rng.choice(PREPS)} {noun_phrase(rng)}"
                         for _ in range(rng.randint(12, 20)))
    if defect == "ellipsis_teasers":
        return "\n".join(" ".join(sentence(rng).split()[:rng.randint(6, 10)]) + "..."
                         for _ in range(rng.randint(10, 14)))
    if defect == "repeated_lines":
        menu = [f"Home | {p} | News | Contact" for p in rng.sample(PLACES, 2)]
        body = [paragraph(rng, 1) for _ in range(3)]
        return "\n".join(menu * 6 + body)
    if defect == "repeated_sentences":
        s = sentence(rng)
        return " ".join([s] * rng.randint(8, 12)) + "\n" + paragraph(rng, 1)
    if defect == "keyword_list":
        return "\n".join(" ".join(rng.choice(NOUNS + ADJS + PLACES) for _ in range(12))
                         for _ in range(rng.randint(6, 9)))
    if defect == "number_table":
        rows = ["Results for " + rng.choice(PLACES) + " and the region"]
        for _ in range(rng.randint(12, 16)):
            rows.append(" ".join(f"{rng.uniform(0, 100):.1f}" for _ in range(6)))
        return "\n".join(rows)
    if defect == "lorem_ipsum":
        return paragraph(rng, 3) + "\nLorem ipsum dolor sit amet, consectetur adipiscing " \
            "elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua.\n" + \
            paragraph(rng, 3)
    if defect == "code":
        name = rng.choice(NOUNS).replace("-", "_")
        return (paragraph(rng, 3) + "\n" + f"function update_{name}(items) {{ for (let i = 0; "
                "i < items.length; i++) { items[i].count += 1; } return items; }\n"
                + paragraph(rng, 3))
    if defect == "long_tokens":
        alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
        toks = ["".join(rng.choice(alphabet) for _ in range(rng.randint(20, 40)))
                for _ in range(rng.randint(60, 80))]
        return "Download mirrors and checksums for the files of the\n" + " ".join(toks)
    raise ValueError(f"unknown defect {defect!r}")


def make_corpus(seed: int = SEED) -> list[dict]:
    """All documents, shuffled, with ids doc-0001... in file order."""
    rng = random.Random(seed)
    docs: list[dict] = []

    def add(text, url, group=None, edit="original", quality="good"):
        docs.append({"url": url, "text": text, "truth_dup_group": group, "truth_edit": edit,
                     "truth_quality": quality})

    site_words = lambda: rng.choice(NOUNS) + "-" + rng.choice(NOUNS)  # noqa: E731
    for _ in range(N_UNIQUE):
        head, foot = header_footer(rng)
        add(_join(head, good_paragraphs(rng), foot),
            f"https://{rng.choice(PLACES).lower()}.example/{site_words()}")
    edit_names = list(VARIANT_EDITS)
    for g in range(N_GROUPS):
        group = f"dup-{g + 1:02d}"
        head, foot = header_footer(rng)
        paras = good_paragraphs(rng)
        while len(paras) < 4:  # room for "one paragraph dropped"
            paras.append(paragraph(rng, 3))
        path = site_words()
        add(_join(head, paras, foot), f"https://news{g}.example/{path}", group)
        for k, edit in enumerate(rng.sample(edit_names, rng.randint(1, 3))):
            add(VARIANT_EDITS[edit](rng, head, paras, foot),
                f"https://mirror{k}.example/{path}", group, edit)
    for site, boilerplate in SITES.items():
        for _ in range(SITE_DOCS):
            add("\n".join([*(paragraph(rng, 2) for _ in range(3)), boilerplate]),
                f"https://{site}/{site_words()}", edit="shares the site's boilerplate paragraph")
    for defect in DEFECTS:
        for _ in range(PER_DEFECT):
            add(bad_document(rng, defect), f"https://{site_words()}.example/",
                edit="planted defect", quality=defect)
    rng.shuffle(docs)
    return [{"id": f"doc-{i + 1:04d}", **d} for i, d in enumerate(docs)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).resolve().parent / "corpus.jsonl",
                        help="output JSONL file (default: corpus.jsonl next to this script)")
    args = parser.parse_args(argv)
    docs = make_corpus()
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    print(f"wrote {len(docs)} documents to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
