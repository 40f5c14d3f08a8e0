"""trec_eval's numbers for any TREC run file, computed by ragexp's own retrieval metrics
(ragexp.metrics.retrieval): `python -m ragexp.trec_eval QRELS RUN [-m MEASURE] [-q] [-l LEVEL]`.

QRELS lines are `qid iter docno rel`, RUN lines `qid Q0 docno rank score tag`. As in trec_eval, a
run is ordered by score (descending), ties broken by docno in reverse byte order (the rank
column is ignored); only queries in both files are evaluated; documents not in the qrels are
non-relevant; a negative grade means "judged as unjudged" and counts nowhere. Measures use
trec_eval's names (`-m P.5,10 -m ndcg_cut.10 -m map -m recip_rank -m recall -m success`); without
`-m`, all of them at trec_eval's default cutoffs. Output: `measure<TAB>qid<TAB>value` lines,
per query with `-q`, then the mean over queries (qid `all`)."""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ragexp.errors import RagexpError
from ragexp.base.names import MetricName
from ragexp.metrics.retrieval import UNJUDGED, Measure, Ranking, measure

LONG_CUTOFFS = (5, 10, 15, 20, 30, 100, 200, 500, 1000)
# trec_eval measure family -> (ragexp metric family, default cutoffs; () = the whole ranking)
FAMILIES: dict[str, tuple[str, tuple[int, ...]]] = {
    "map": ("map", ()),
    "recip_rank": ("mrr", ()),
    "P": ("precision", LONG_CUTOFFS),
    "recall": ("recall", LONG_CUTOFFS),
    "ndcg_cut": ("ndcg", LONG_CUTOFFS),
    "success": ("hit_rate", (1, 5, 10)),
    "map_cut": ("map", LONG_CUTOFFS),
}
DEFAULT = ("map", "recip_rank", "P", "recall", "ndcg_cut", "success")


@dataclass(frozen=True)
class TrecMeasure:
    """A measure as trec_eval names it (`ndcg_cut_10`) and ragexp computes it (`ndcg@10`)."""

    label: str
    measure: Measure


def stop(where: str, reason: str) -> None:
    raise RagexpError(f"{where}: {reason}")


def trec_lines(path: str | Path, kind: str) -> Iterator[tuple[str, list[str]]]:
    """("file:line", whitespace-separated fields) of each non-blank line of a TREC qrels or run file."""
    file = Path(path)
    if file.is_dir():
        raise RagexpError(f"{path}: is a folder, not a TREC {kind} file")
    try:  # a byte-order mark is not part of the first field; bytes that are not UTF-8 name their line
        lines = file.read_text(encoding="utf-8-sig", errors="surrogateescape").splitlines()
    except OSError as err:
        raise RagexpError(f"{path}: cannot read the {kind} file ({err.strerror})") from None
    for number, line in enumerate(lines, start=1):
        if any("\udc80" <= c <= "\udcff" for c in line):
            raise RagexpError(f"{file}:{number}: bytes that are not UTF-8 (save the {kind} file as UTF-8)")
        if fields := line.split():
            yield f"{file}:{number}", fields


def read_qrels(path: str | Path, malformed: Callable[[str, str], None] = stop) -> dict[str, dict[str, int]]:
    """qid -> {docno: grade} from a TREC qrels file (`qid iter docno grade` per line). A malformed
    line is passed to `malformed("file:line", reason)`, which raises by default (a dataset loader
    passes its on_error policy) and is otherwise left out."""
    qrels: dict[str, dict[str, int]] = {}
    for where, fields in trec_lines(path, "qrels"):
        if len(fields) < 4:
            malformed(where, f"a qrels line is 'qid iter doc_id grade', got {len(fields)} fields")
            continue
        qid, _, docno, rel = fields[:4]  # trec_eval ignores anything after the fourth field
        try:
            grade = int(rel)
        except ValueError:
            malformed(where, f"grade {rel!r} is not an integer")
            continue
        if docno in qrels.setdefault(qid, {}):
            malformed(where, f"document {docno} judged twice for query {qid}")
            continue
        qrels[qid][docno] = grade
    return qrels


def read_run(path: str | Path) -> dict[str, list[str]]:
    """qid -> docnos in trec_eval's order: score descending, ties by docno descending."""
    scored: dict[str, dict[str, float]] = {}
    for where, fields in trec_lines(path, "run"):
        if len(fields) < 6:
            raise RagexpError(f"{where}: a run line is 'qid Q0 docno rank score tag', got {len(fields)} fields")
        qid, _, docno, _, score = fields[:5]  # trec_eval ignores anything after the tag
        try:
            value = float(score)
        except ValueError:
            raise RagexpError(f"{where}: score {score!r} is not a number") from None
        if docno in scored.setdefault(qid, {}):
            raise RagexpError(f"{where}: document {docno} retrieved twice for query {qid}")
        scored[qid][docno] = value
    return {
        qid: [d for d, _ in sorted(docs.items(), key=lambda item: (item[1], item[0].encode()), reverse=True)]
        for qid, docs in scored.items()
    }


def ranking(docnos: list[str], judged: dict[str, int]) -> Ranking:
    grades = tuple(judged[d] if judged.get(d, UNJUDGED) >= 0 else UNJUDGED for d in docnos)
    return Ranking(grades, tuple(g for g in judged.values() if g >= 0), tuple(docnos))


def parse_measures(specs: list[str] | None, level: int, gain: str) -> list[TrecMeasure]:
    """`-m` arguments (`P.5,10`, `map`, `ndcg_cut`) -> measures, in the order given."""
    chosen: list[TrecMeasure] = []
    for spec in specs or list(DEFAULT):
        for item in (spec.split() if spec else []):
            family, _, params = item.partition(".")
            if family in ("all", "all_trec"):
                chosen += parse_measures(list(DEFAULT), level, gain)
                continue
            if family not in FAMILIES:
                raise RagexpError(f"-m {item}: unknown measure; use {', '.join(FAMILIES)} (with .k1,k2 cutoffs) or all")
            base, defaults = FAMILIES[family]
            try:
                cutoffs = tuple(int(c) for c in params.split(",")) if params else defaults
            except ValueError:
                raise RagexpError(f"-m {item}: cutoffs must be positive integers") from None
            if params and not defaults:
                raise RagexpError(f"-m {item}: {family} takes no cutoffs")
            for cutoff in cutoffs or (None,):
                label = family if cutoff is None else f"{family}_{cutoff}"
                chosen.append(TrecMeasure(label, measure(MetricName(base, cutoff), level, gain, setting=f"-m {item}")))
    return chosen


def evaluate(qrels: dict[str, dict[str, int]], run: dict[str, list[str]], measures: list[TrecMeasure]
             ) -> dict[str, dict[str, float]]:
    """qid -> {label: value} for each query in both files, plus "all": the means."""
    queries = sorted(set(qrels) & set(run), key=str.encode)
    if not queries:
        raise RagexpError("no query has both relevance judgements and results")
    per_query = {}
    for qid in queries:
        judged = ranking(run[qid], qrels[qid])
        per_query[qid] = {m.label: m.measure.value(judged) for m in measures}
    per_query["all"] = {m.label: sum(per_query[q][m.label] for q in queries) / len(queries) for m in measures}
    return per_query


def skipped(qrels: dict[str, dict[str, int]], run: dict[str, list[str]], shown: int = 5) -> list[str]:
    """What `evaluate` left out: queries in one file only, named (the first `shown` of each kind).
    NIST trec_eval stops with an error (exit 4) on qrels naming a query the run lacks, so the note
    says so: files that are to be compared with it need the same queries on both sides."""
    notes, unranked = [], set(qrels) - set(run)
    for ids, where in ((unranked, "of the qrels has no results in the run"),
                       (set(run) - set(qrels), "of the run has no relevance judgements")):
        if ids:
            named = sorted(ids, key=str.encode)
            more = f", and {len(named) - shown} more" if len(named) > shown else ""
            noun = "query" if len(named) == 1 else "queries"
            verb = where if len(named) == 1 else where.replace(" has ", " have ")
            notes.append(f"{len(named)} {noun} {verb} ({', '.join(named[:shown])}{more}): skipped")
    if unranked:
        notes.append("NIST trec_eval stops on qrels that name a query the run lacks (exit 4); give it files with the same queries")
    return notes


def trec_measure(name: str) -> tuple[str, str] | None:
    """A ragexp retrieval metric as trec_eval names it: (`-m` argument, output label), e.g.
    `ndcg@10` -> ("ndcg_cut.10", "ndcg_cut_10"); None when trec_eval has no such measure."""
    metric = MetricName.parse(name)
    for family, (base, defaults) in FAMILIES.items():
        if base == metric.base and (metric.cutoff is None) == (not defaults):
            if metric.cutoff is None:
                return family, family
            return f"{family}.{metric.cutoff}", f"{family}_{metric.cutoff}"
    return None


RUN_FILE, QRELS_FILE, CHECK_FILE = "run.trec", "qrels.trec", "retrieval.json"


def check(folder: str | Path) -> tuple[list[str], bool]:
    """Recomputes every retrieval mean a run logged from its run folder alone (`run.trec`,
    `qrels.trec` and `retrieval.json`, written by the run): one line per metric, logged vs
    recomputed, and whether all are equal to 4 decimals. A reranked run's first-stage ranking
    (`first_stage` in retrieval.json: its run file and means) is recomputed the same way."""
    import json

    folder = Path(folder)
    if not (folder / CHECK_FILE).is_file():
        raise RagexpError(f"{folder}: no {CHECK_FILE}; give the folder of a run (outputs/DATE/TIME or a sweep's job)")
    spec = json.loads((folder / CHECK_FILE).read_text())
    qrels = read_qrels(folder / QRELS_FILE)
    out, equal = compared(qrels, folder / RUN_FILE, spec["logged"], spec["level"], spec["gain"])
    first = spec.get("first_stage")
    if first:
        lines, same = compared(qrels, folder / Path(first["run"]).name, first["logged"], spec["level"], spec["gain"])
        out += [f"first stage ({first['run']}, before reranking):", *lines]
        equal &= same
    return out, equal


def compared(qrels: dict[str, dict[str, int]], run_file: Path, logged_means: dict[str, float], level: int,
             gain: str) -> tuple[list[str], bool]:
    """Each logged mean against trec_eval's on `run_file`: the lines of the table, and whether all agree."""
    named = {name: trec_measure(name) for name in logged_means}
    usable = {name: m for name, m in named.items() if m is not None}
    measures = parse_measures([m for m, _ in usable.values()], level, gain)
    means = evaluate(qrels, read_run(run_file), measures)["all"]
    out, equal = [f"{'metric':<16}{'trec_eval':<16}{'logged':>10}{'recomputed':>12}"], True
    for name, logged in logged_means.items():
        if name not in usable:
            out.append(f"{name:<16}{'(none)':<16}{logged:>10.4f}{'—':>12}")
            continue
        value = round(means[usable[name][1]], 4)
        equal &= abs(value - logged) < 5e-5
        out.append(f"{name:<16}{usable[name][1]:<16}{logged:>10.4f}{value:>12.4f}" + ("" if abs(value - logged) < 5e-5 else "  DIFFERS"))
    return out, equal


def lines(results: dict[str, dict[str, float]], per_query: bool) -> list[str]:
    out = []
    for qid, values in results.items():
        if qid == "all" or per_query:
            out += [f"{label:<22}\t{qid}\t{value:.4f}" for label, value in values.items()]
    return out


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "--check":
        return check_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m ragexp.trec_eval", description=__doc__.split("\n\n")[0],
                                     epilog="python -m ragexp.trec_eval --check RUN_FOLDER: recompute a run's logged "
                                            "retrieval means from its run.trec and qrels.trec")
    parser.add_argument("qrels", help="TREC qrels file: qid iter docno rel")
    parser.add_argument("run", help="TREC run file: qid Q0 docno rank score tag")
    parser.add_argument("-m", dest="measures", action="append",
                        help=f"measure, e.g. P.5,10 or ndcg_cut.10 (repeatable; default: {' '.join(DEFAULT)})")
    parser.add_argument("-q", dest="per_query", action="store_true", help="print each query's values too")
    parser.add_argument("-l", dest="level", type=int, default=1, help="lowest grade that counts as relevant (default 1)")
    parser.add_argument("--gain", choices=("linear", "exponential"), default="linear",
                        help="NDCG gain: the grade (trec_eval) or 2^grade - 1")
    args = parser.parse_args(argv)
    try:
        measures = parse_measures(args.measures, args.level, args.gain)
        qrels, run = read_qrels(args.qrels), read_run(args.run)
        results = evaluate(qrels, run, measures)
    except RagexpError as err:
        print(f"ragexp.trec_eval: error: {err}", file=sys.stderr)
        return 2
    for note in skipped(qrels, run):
        print(f"ragexp.trec_eval: {note}", file=sys.stderr)
    print("\n".join(lines(results, args.per_query)))
    return 0


def check_main(folders: list[str]) -> int:
    if not folders:
        print("usage: python -m ragexp.trec_eval --check RUN_FOLDER [RUN_FOLDER ...]", file=sys.stderr)
        return 2
    ok = True
    for folder in folders:
        try:
            out, equal = check(folder)
        except RagexpError as err:
            print(f"ragexp.trec_eval: error: {err}", file=sys.stderr)
            return 2
        print(f"{folder}: " + ("every logged retrieval mean recomputed" if equal else "DIFFERENT from the logged means"))
        print("\n".join(out))
        ok &= equal
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
