"""Bench group short_answers: do the offline judges read a short answer ("Port 7070.") as a claim
about its question's subject, supported when the context says it and flagged when it does not?

A labelled set is built from the shared data (../shared/data; nothing is copied into the repository):
- HotpotQA (hotpotqa_ircot_dev500): the golden answer span of every question whose answer is not
  yes/no, judged against the question's two supporting paragraphs;
- MS MARCO (autorag_msmarco): the golden answers of at most 8 words, judged against the golden passages.

Per question, the items are (each supported item "supported" for the labels):
- supported: the answer as written ("Chief of Protocol."); reworded ("It is Chief of Protocol.", "The
  answer is 7070."); a number or a date written another way ("1,000" as "1000", "April 23, 1928" as
  "23 April 1928");
- unsupported: the answer with a name or a number swapped for another one found in the same
  context (so that finding the answer's words somewhere in the context is not enough), and the answer
  of another question (words the context lacks).

Questions go to the tuning part or the held-out part by a hash of their id (TUNE_SHARE tune); the
figures that count are the held-out part's: false alarms (supported items flagged as
hallucinations) and recall (unsupported items flagged), per judge, per kind of item.

    python bench/run.py short_answers                     # the figures, into bench/results.json
    python bench/short_answers.py figures [--part tune]   # the figures as JSON
    python bench/short_answers.py tune                    # the settings grid on the tuning part
    python bench/short_answers.py items > items.jsonl     # the labelled set, to read
    python bench/short_answers.py page after.json before.json   # the page, before (PYTHONPATH=old checkout) and after
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator, Sequence

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
TUNE_SHARE = 0.4
MAX_WORDS = 8  # the MS MARCO answers taken as short
MONTHS = ("January February March April May June July August September October November December").split()
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
_NAME = re.compile(r"\b[A-Z][\w'-]*(?:\s+(?:of|the|de|von|van|and|&)?\s*[A-Z][\w'-]*)*")
_DATE_MDY = re.compile(r"\b(" + "|".join(MONTHS) + r") (\d{1,2}), (\d{4})\b")
_DATE_DMY = re.compile(r"\b(\d{1,2}) (" + "|".join(MONTHS) + r") (\d{4})\b")


@dataclass(frozen=True)
class Item:
    set: str
    id: str
    group: str  # the question: both parts never share one
    question: str
    passages: tuple[str, ...]
    answer: str
    supported: bool
    kind: str  # verbatim, reworded, written_otherwise, swapped, other_question

    @property
    def part(self) -> str:
        digest = int(hashlib.sha256(f"{self.set}/{self.group}".encode()).hexdigest()[:8], 16)
        return "tune" if digest / 0xFFFFFFFF < TUNE_SHARE else "heldout"


def pick(options: Sequence[str], key: str) -> str | None:
    """One of `options` chosen by a hash of `key` (the same on every machine)."""
    if not options:
        return None
    return sorted(options)[int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % len(options)]


def sentence(answer: str) -> str:
    answer = answer.strip()
    return answer if answer.endswith((".", "!", "?")) else answer + "."


def written_otherwise(answer: str) -> str | None:
    """The answer's date or number written another way, or None when it has neither."""
    if m := _DATE_MDY.search(answer):
        return answer[:m.start()] + f"{int(m[2])} {m[1]} {m[3]}" + answer[m.end():]
    if m := _DATE_DMY.search(answer):
        return answer[:m.start()] + f"{m[2]} {int(m[1])}, {m[3]}" + answer[m.end():]
    if m := re.search(r"\b\d{1,3}(?:,\d{3})+\b", answer):
        return answer[:m.start()] + m[0].replace(",", "") + answer[m.end():]
    if m := re.search(r"\b\d{4,}\b", answer):
        if len(m[0]) > 4:  # not a year
            return answer[:m.start()] + f"{int(m[0]):,}" + answer[m.end():]
        return f"In {answer}" if m[0] == answer else None  # a year alone: said as a sentence
    return None


def swapped(answer: str, question: str, context: str, key: str, names_swapped: bool = True) -> str | None:
    """The answer with its number, or else its name, swapped for another one the context holds (one
    the question does not name), or None when the context has no such other one."""
    lowered = answer.lower()
    if m := _NUMBER.search(answer):
        others = {n.rstrip(",") for n in _NUMBER.findall(context)} - {m[0]}
        others = [n for n in others if n not in lowered and n not in question and len(n) == len(m[0])]
        if choice := pick(others, key):
            return answer[:m.start()] + choice + answer[m.end():]
        return None
    if not answer[:1].isupper() or not names_swapped:
        return None
    names = {m[0].strip() for m in _NAME.finditer(context) if not re.search(r"(^|[.!?:;\n\"]\s*)$", context[:m.start()])}
    others = [n for n in names if n.lower() not in lowered and lowered not in n.lower() and n.lower() not in question.lower()
              and not any(w.lower() in lowered.split() for w in n.split()) and len(n) > 2]
    return pick(others, key)


LOWER_FIRST = frozenset("a an the one two three four five six seven eight nine ten about around between every "
                        "approximately over under less more".split())


def reworded(answer: str, key: str) -> str:
    """The answer said as a sentence ("It is port 7070."): its first word lower-cased when it is an
    article or a count ("It is a bachelor's degree.")."""
    text = answer.strip().rstrip(".")
    first = text.split()[0]
    if first.lower() in LOWER_FIRST:
        text = first.lower() + text[len(first):]
    return pick([f"It is {text}.", f"The answer is {text}.", f"That would be {text}."], key)  # type: ignore[return-value]


def items_of(set_name: str, qid: str, question: str, passages: tuple[str, ...], answer: str, other: str,
             names_swapped: bool = True) -> Iterator[Item]:
    context = "\n".join(passages)
    make = lambda text, supported, kind: Item(set_name, f"{qid}/{kind}", qid, question, passages, text, supported, kind)  # noqa: E731
    yield make(sentence(answer), True, "verbatim")
    yield make(reworded(answer, qid), True, "reworded")
    if other_form := written_otherwise(answer):
        yield make(sentence(other_form), True, "written_otherwise")
    if swap := swapped(answer, question, context, qid, names_swapped):
        yield make(sentence(swap), False, "swapped")
    if other and not all(w in context.lower() for w in re.findall(r"\w+", other.lower())):
        yield make(sentence(other), False, "other_question")


def hotpotqa(folder: Path) -> list[Item]:
    rows = [json.loads(line) for line in (folder / "dev_subsampled.jsonl").read_text().splitlines()]
    answers = [r["answers_objects"][0]["spans"][0] for r in rows]
    kept = [(r, a) for r, a in zip(rows, answers) if a.lower() not in ("yes", "no")]
    items = []
    for n, (row, answer) in enumerate(kept):
        passages = tuple(c["paragraph_text"] for c in row["contexts"] if c["is_supporting"])
        if answer.lower() not in "\n".join(passages).lower():
            continue
        other = kept[(n + 1) % len(kept)][1]
        items += items_of("hotpotqa", row["question_id"], row["question_text"], passages, answer, other)
    return items


def msmarco(folder: Path) -> list[Item]:
    import pandas as pd

    qa = pd.read_parquet(folder / "qa.parquet")
    corpus = dict(pd.read_parquet(folder / "corpus.parquet")[["doc_id", "contents"]].itertuples(index=False))
    kept = []
    for row in qa.itertuples(index=False):
        answer = min((str(a) for a in row.generation_gt), key=lambda a: len(a.split()))
        if len(answer.split()) > MAX_WORDS or answer.lower().strip(". ") in ("yes", "no"):
            continue
        passages = tuple(corpus[d] for group in row.retrieval_gt for d in group)
        kept.append((str(row.qid), str(row.query), passages, answer))
    items = []
    for n, (qid, question, passages, answer) in enumerate(kept):
        # its answers are sentences written by people (a capital first word is no name): numbers are swapped only
        items += items_of("msmarco", qid, question, passages, answer, kept[(n + 1) % len(kept)][3], names_swapped=False)
    return items


def load(shared: Path = SHARED) -> list[Item]:
    """The labelled set from ../shared/data (FileNotFoundError naming what is missing)."""
    for name in ("hotpotqa_ircot_dev500", "autorag_msmarco"):
        if not (shared / name).is_dir():
            raise FileNotFoundError(f"{shared / name} is missing: the short-answer set is built from ../shared/data")
    return hotpotqa(shared / "hotpotqa_ircot_dev500") + msmarco(shared / "autorag_msmarco")


class WordsInContext:
    """The plain baseline: an answer is flagged unless the context holds every one of its content
    words and numbers, anywhere (stop words and the fillers of "It is ..." left out)."""

    def judge(self, question, hits, answer):
        from types import SimpleNamespace

        from ragexp.judges.short_answers import FILLER, tokens

        context = set().union(*(tokens(h.chunk.text) for h in hits))
        return SimpleNamespace(hallucination=not tokens(answer.text) - FILLER <= context)


def judges() -> dict:
    """The two offline judges with their conf/judge/ settings and MiniLM, as in a default run, and
    the plain baseline."""
    sys.path.insert(0, str(ROOT / "bench"))
    from judge_agreement import learned_judge, offline_judge, scoring_embedder

    embedder = scoring_embedder()
    found = {"offline": offline_judge(embedder), "offline_learned": learned_judge(embedder)}
    try:  # the baseline reads words as the short-answer reading does: not in a checkout from before it
        import ragexp.judges.short_answers  # noqa: F401
    except ImportError:
        return found
    return {**found, "words_in_context": WordsInContext()}


GRID = {"short_answer_share": (0.3, 0.5, 0.7), "question_fit_margin": (0.2, 0.25, 0.3, 0.35, 0.45, 0.6, 1.0)}
MAX_FALSE_ALARMS = 0.05


def tune(items: Sequence[Item]) -> dict:
    """judge=offline's short-answer settings over GRID on the tuning part: the one with the best recall
    among those with at most MAX_FALSE_ALARMS false alarms (on both sets together)."""
    from itertools import product

    from judge_agreement import offline_judge, scoring_embedder

    embedder = scoring_embedder()
    rows = []
    for values in product(*GRID.values()):
        settings = dict(zip(GRID, values))
        found = figures(items, {"offline": offline_judge(embedder, **settings)})["offline"]["all"]
        rows.append({**settings, "false_alarms": found["false_alarms"], "recall": found["recall"]})
        print(json.dumps(rows[-1]), file=sys.stderr)
    chosen = max((r for r in rows if r["false_alarms"] <= MAX_FALSE_ALARMS), key=lambda r: (r["recall"], -r["false_alarms"]),
                 default=None)
    return {"grid": rows, "chosen": chosen}


def figures(items: Sequence[Item], judged: dict) -> dict:
    """Per judge and set: false alarms on the supported items, recall on the unsupported ones, and
    both per kind of item."""
    from judge_agreement import hits_of
    from ragexp.types import Answer, Question

    out: dict = {}
    for name, judge in judged.items():
        flags = []
        for item in items:
            flags.append(judge.judge(Question(item.id, item.question, ()), hits_of(item), Answer(item.answer)).hallucination)
        for set_name in sorted({i.set for i in items}) + ["all"]:
            rows = [(i, f) for i, f in zip(items, flags) if set_name in ("all", i.set)]
            supported = [f for i, f in rows if i.supported]
            unsupported = [f for i, f in rows if not i.supported]
            kinds = {}
            for kind in sorted({i.kind for i, _ in rows}):
                kf = [f for i, f in rows if i.kind == kind]
                kinds[kind] = {"items": len(kf), "flagged": round(sum(kf) / len(kf), 3)}
            out.setdefault(name, {})[set_name] = {
                "supported": len(supported), "unsupported": len(unsupported),
                "false_alarms": round(sum(supported) / max(len(supported), 1), 3),
                "recall": round(sum(unsupported) / max(len(unsupported), 1), 3), "kinds": kinds}
    return out


KINDS = ("verbatim", "reworded", "written_otherwise", "swapped", "other_question")


def measure(work_dir: Path | None = None, args=None) -> dict:
    """The held-out figures (bench/run.py's group short_answers), also written to bench/results/short_answers.md."""
    import os
    import time

    started = time.perf_counter()
    found = {"load_1min": round(os.getloadavg()[0], 1), **figures([i for i in load() if i.part == "heldout"], judges())}
    found["seconds"] = round(time.perf_counter() - started, 1)
    (ROOT / "bench" / "results" / "short_answers.md").write_text(page(found))
    return found


def page(after: dict, before: dict | None = None) -> str:
    """The figures as a Markdown page; with `before` (the same figures of an older checkout), both."""
    import os
    import time

    columns = " | ".join(k.replace("_", " ") for k in KINDS)
    lines = ["# Short answers read with their question: the offline judges on labelled short answers", "",
             f"`python bench/run.py short_answers`, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, 1-minute "
             f"load {after.get('load_1min')} at the start, {after.get('seconds')} s. The held-out part of the set "
             "bench/short_answers.py builds from ../shared/data (nothing was tuned on it; the settings were chosen by "
             "`python bench/short_answers.py tune` on the tuning part). False alarms: supported answers flagged as "
             "hallucinations (goal <= 0.05); recall: unsupported answers flagged (goal >= 0.90). The kinds give the "
             "share flagged. words_in_context is the plain baseline: flagged unless the context holds every content "
             "word and number of the answer.", "",
             f"| set | judge | supported / unsupported | false alarms | recall | {columns} |",
             "| --- | --- | --- | --- | --- | " + " | ".join("---" for _ in KINDS) + " |"]
    for set_name in ("hotpotqa", "msmarco", "all"):
        for judge in ("offline", "offline_learned", "words_in_context"):
            rows = [(label, f[judge][set_name]) for label, f in (("before", before), ("after", after))
                    if f and judge in f]
            for label, f in rows:
                name = f"{judge} ({label})" if before else judge
                kinds = " | ".join(str(f["kinds"].get(k, {}).get("flagged", "-")) for k in KINDS)
                lines.append(f"| {set_name} | {name} | {f['supported']} / {f['unsupported']} | {f['false_alarms']} "
                             f"| {f['recall']} | {kinds} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("items", "figures", "tune", "page"))
    parser.add_argument("--part", choices=("tune", "heldout", "all"), default="heldout")
    parser.add_argument("files", nargs="*", help="page: AFTER.json [BEFORE.json], as `figures` printed them")
    args = parser.parse_args(argv)
    if args.command == "page":
        after, *before = [json.loads(Path(f).read_text()) for f in args.files]
        print(page(after, before[0] if before else None), end="")
        return 0
    items = [i for i in load() if ("tune" if args.command == "tune" else args.part) in ("all", i.part)]
    if args.command == "items":
        for item in items:
            print(json.dumps({**asdict(item), "part": item.part}))
        return 0
    if args.command == "tune":
        print(json.dumps(tune(items), indent=1))
        return 0
    print(json.dumps({"part": args.part, **figures(items, judges())}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
