"""`synth/generator=cloze`: questions from the corpus's own sentences, no LLM. Each template is a
regular expression over one sentence (or a heading and the paragraph under it) and the question
it becomes; the expected answer is the matched sentence itself, verbatim (so `relevance=span`
finds its chunk). A chunk with several matches gives one, chosen with the seed.

| type | sentence | question |
| --- | --- | --- |
| factual | "X is a/an/the Y." (or "The default/maximum/... X is Y.") | "What is X?" |
| factual | "X defaults to Y." | "What does X default to?" |
| procedural | "To X, Y." | "How do you X?" |
| troubleshooting | a heading naming a problem ("Jobs run twice", "`QRY-4002`", "... fails ...") and its paragraph | 'How do you resolve "H"?' |
| troubleshooting | "If/When X, Y." where X names a problem (error, fail, expire, ...) | "What happens if X?" / "What should you do if X?" |
| comparative | "X is/are more A / Aer than Y" | "How does X compare with Y?" |
| comparative | "Unlike / Compared with Y, X ..." | "How does X differ from Y?" |
| comparative | "X changed from A to B" | "How did X change?" |
| multi_hop | one templated sentence from each of two neighbouring chunks of different documents | the two questions joined by "and" |

Multi-hop questions are conjunctions (two facts, one per document), not bridge reasoning."""
from __future__ import annotations

import hashlib
import random
import re

from ragexp.synth import TYPES
from ragexp.synth.candidates import Candidate, NoCandidate, Source
from ragexp.base.text import split_sentences
from ragexp.types import Chunk

PRONOUN = re.compile(r"^(it|this|that|these|those|there|they|you|we|he|she|each|every|only|which|what|here|one|all|both|some|"
                     r"a|an|setting|using|running|if|when)\b", re.I)
DEICTIC = re.compile(r"\b(this|that|these|those|it|its|them|own|above|below|same)\b", re.I)  # needs the text around it
CLAUSE = re.compile(r"\b(is|are|was|and|sets|with)\b", re.I)  # a subject that is really a clause
PROBLEM = re.compile(r"\b(fail\w*|error\w*|cannot|can't|not|refus\w*|twice|stuck|stay\w*|slow\w*|lost|missing|time[sd]? out|timeout|"
                     r"denied|expire[sd]?|crash\w*|reject\w*|full|exceed\w*|QRY-\d+|no_leader|unavailable|too many)\b", re.I)
IMPERATIVE = re.compile(r"^(check|run|set|increase|raise|use|make|restart|verify|ensure|upgrade|remove|add|see|try|reduce|lower|"
                        r"delete|create|enable|disable|look|fix|convert|wait|call|pass|configure|contact|retry)\b", re.I)
SUBJECT_END = re.compile(r"\s(is|are|was|were|does|do|can|has|have|uses|use|runs|keeps|stores|returns|will|must|may|only|"
                         r"never|always|also|accepts|requires|supports|needs|need|writes|sends|starts|works|takes|makes)\b")

TEMPLATES = {
    "factual": [
        (re.compile(r"^(?P<x>[A-Z`][^,;:()?!]{2,70}?) (?P<verb>is|are) (?P<y>(?:a|an|the|one of)\b.{3,})\.$"), "What {verb} {x}?"),
        (re.compile(r"^(?P<x>The (?:default|maximum|minimum|max|limit|size|port|number|name|id|unit|range)\b[^,;:()?!]{0,60}?) "
                    r"(?P<verb>is|are) (?P<y>.{1,120})\.$", re.I), "What {verb} {x}?"),
        (re.compile(r"^(?P<x>[A-Z`][^,;:()?!]{2,70}?) defaults? to (?P<y>.{1,120})\.$"), "What does {x} default to?"),
    ],
    "procedural": [
        (re.compile(r"^To (?P<x>[^,]{5,100}), (?P<y>.{3,})\.$"), "How do you {x}?"),
    ],
    "troubleshooting": [
        (re.compile(r"^(?:If|When) (?P<x>[^,]{5,120}), (?P<y>.{3,})\.$"), "{ask} {x}?"),
    ],
    "comparative": [
        (re.compile(r"^(?P<x>[A-Z`][^,;:()?!]{2,70}?) (?:is|are|runs|uses|takes|needs|costs) (?:\w+ )?"
                    r"(?P<adj>(?:more|less|fewer) \w+|\w+er) than (?P<y>[^,;.]{2,80})"), "How does {x} compare with {y}?"),
        (re.compile(r"^(?:Unlike|Compared (?:with|to)) (?P<y>[^,]{3,70}), (?P<x>.{3,})\.$"), "How does {x} differ from {y}?"),
        (re.compile(r"^(?P<x>[A-Z`][^,;:()?!]{2,70}?) (?:has )?(?:changed|was changed|moved) from (?P<a>.{1,60}?) to (?P<b>.{1,60}?)"
                    r"(?: in .*)?\.$"), "How did {x} change?"),
    ],
}
HEADED_PROBLEM = re.compile(r"^#{2,4}\s+(?P<title>[^\n]+)\n+(?P<body>(?:[^#\n|`][^\n]*\n?)+)", re.M)
PROMPT_HASH = hashlib.sha256(repr([(t, [(p.pattern, q) for p, q in ts]) for t, ts in TEMPLATES.items()]
                                  + [HEADED_PROBLEM.pattern, PROBLEM.pattern]).encode()).hexdigest()[:12]
LIST_MARK = re.compile(r"^\s*(?:[-*+>]|\d+[.)])\s+")


def lower_first(text: str) -> str:
    """'The default port' -> 'the default port'; 'Quarry' and '`qry`' stay."""
    first = text.split(" ", 1)[0]
    return text[0].lower() + text[1:] if first[:1].isupper() and first[1:].islower() and first.lower() in (
        "the", "a", "an", "each", "every", "your", "its", "our", "this", "that") else text


def sentences(chunk: Chunk) -> list[str]:
    """The chunk's sentences without list markers (still verbatim substrings of the chunk);
    headings, table rows and code fences left out."""
    found = []
    for sentence in split_sentences(chunk.text):
        sentence = LIST_MARK.sub("", sentence).strip()
        if sentence and not sentence.startswith(("#", "|", "```")) and len(sentence.split()) >= 4:
            found.append(sentence)
    return found


def clean(text: str) -> str:
    return " ".join(text.replace("**", "").split()).strip(" .")


def matches(type_: str, chunk: Chunk) -> list[tuple[str, str]]:
    """(question, answer sentence) for every sentence of `chunk` a template of `type_` fits."""
    found = []
    if type_ == "troubleshooting":
        for match in HEADED_PROBLEM.finditer(chunk.text):
            title, body = clean(match.group("title").replace("`", "")), match.group("body").strip()
            body_sentences = split_sentences(body)[:3]
            if PROBLEM.search(title) and len(title.split()) >= 2 and body_sentences and len(body.split()) >= 6:
                found.append((f'How do you resolve "{title}"?', " ".join(body_sentences)))
    for sentence in sentences(chunk):
        text = clean(sentence) + "."
        for pattern, question in TEMPLATES.get(type_, []):
            fitted = pattern.match(text)
            if fitted is None:
                continue
            fields = {k: clean(v) for k, v in fitted.groupdict().items() if v}
            if question == "How does {x} differ from {y}?":
                subject = SUBJECT_END.search(" " + fields["x"])
                if subject is None or subject.start() == 0:
                    continue
                fields["x"] = fields["x"][: subject.start() - 1]
            x = fields.get("x", "")
            if PRONOUN.match(x) or DEICTIC.search(x) or len(x.split()) > 10:
                continue
            if type_ in ("factual", "comparative") and CLAUSE.search(x):
                continue
            if type_ == "factual" and x.lower().startswith("the ") and len(x.split()) < 4 and not re.search(r"[`._]", x):
                continue  # "the default limit": of what? Too vague out of its context
            if type_ == "troubleshooting":
                if not PROBLEM.search(fields["x"]):
                    continue
                fields["ask"] = "What should you do if" if IMPERATIVE.match(fields["y"]) else "What happens if"
            fields["x"] = lower_first(fields["x"])
            found.append((question.format(**fields), sentence))
            break
    return found


class ClozeGenerator:
    """Template questions from the chunk's own sentences (see the module's table); no LLM, no cost."""

    name = "cloze"
    types = TYPES
    prompt_hash = PROMPT_HASH
    concurrency = 1
    verifies = False

    def __init__(self, seed_salt: str = ""):
        self.seed_salt = seed_salt

    def make(self, source: Source, seed: int = 0) -> Candidate:
        rng = random.Random(f"{seed}:{self.seed_salt}:{source.type}:{'+'.join(c.chunk_id for c in source.chunks)}")
        if source.type == "multi_hop":
            first, second = (self.any_match(chunk, rng) for chunk in source.chunks)
            if first is None or second is None:
                raise NoCandidate("no_template_match", "a chunk of the pair has no sentence that fits a template")
            (q1, a1), (q2, a2) = first, second
            if q1 == q2 or a1 == a2:
                raise NoCandidate("no_template_match", "both chunks give the same question")
            question = f"{q1.rstrip('?')}, and {q2[0].lower() + q2[1:]}"
            return Candidate(source, question, f"{a1} {a2}", (a1, a2), self.name, self.prompt_hash)
        found = matches(source.type, source.chunks[0])
        if not found:
            raise NoCandidate("no_template_match", f"no sentence fits a {source.type} template")
        question, answer = rng.choice(found)
        return Candidate(source, question, answer, (answer,), self.name, self.prompt_hash)

    def usable(self, chunk: Chunk) -> bool:
        """Whether some template fits a sentence of `chunk` (multi-hop pairs are made of such chunks)."""
        return self.any_match(chunk, random.Random(0)) is not None

    @staticmethod
    def any_match(chunk: Chunk, rng: random.Random) -> tuple[str, str] | None:
        for type_ in ("factual", "procedural", "comparative", "troubleshooting"):
            found = matches(type_, chunk)
            if found:
                return rng.choice(found)
        return None
