"""Bench group judge_agreement: how far ragexp's judges agree with people who labelled answers
and summaries as supported by their context or not (docs/how-to/judge-agreement.md).

Per labelled set, on its held-out part (nothing was tuned on it; "validation"): ROC AUC of the
faithfulness score (people's "fully supported" as the positive class), balanced accuracy and
false-alarm rate (share of the supported items flagged) of the hallucination flag, for
- overlap, the baseline every judge is measured against (`overlap`: the share of the answer's
  words found anywhere in the context; no model, no flag), and each judge's AUC minus overlap's with
  a 95% paired bootstrap interval (`paired_bootstrap`: both scored on the same resampled documents);
- the offline judge (ragexp.judges.offline, MiniLM as in a default run where it embeds at all);
- judge=offline_learned (ragexp.judges.learned): its learned verifier with the shipped threshold,
  and with a threshold fitted on the set's own tuning part (what `calibrate --outputs` does on a
  user's labelled answers of one kind);
- judge=llm and judge=triad against the local OpenAI-protocol server (tests/openai_server.py)
  whose scripted replies repeat the people's verdict: a figure below 1 there means the request
  path or the reply parser lost or garbled a verdict on real texts, not anything about an LLM.

The sets are read from the public repositories at the commits named in SOURCES, from a folder
holding their git snapshots, which must be given (`--sources DIR` or RAGEXP_AGREEMENT_SOURCES=DIR,
laid out as DIR/<owner>+<name>/repo; without it, one line says what to fetch), or from the copy
shipped in bench/data/judge_agreement/ where the licence allows. A set that cannot be read is reported as missing, with where to get it.
Each item goes to the tuning or the held-out part by a hash of its group (the question or the
source document, so both parts never share one): TUNE_SHARE of the groups tune.

    python bench/run.py judge_agreement          # the figures, into bench/results.json
    python bench/judge_agreement.py tune         # the offline judge's settings chosen on the tuning part
    python bench/judge_agreement.py learn        # fit the learned verifier on the tuning parts (the shipped JSON)
    python bench/judge_agreement.py figures      # the figures as JSON (PYTHONPATH=another checkout: its judge)
    python bench/judge_agreement.py figures --no-llm --no-learned   # judge=offline and overlap only
    python bench/judge_agreement.py table AFTER.json [BEFORE.json]   # as a Markdown table
    python bench/judge_agreement.py logprobs --work DIR [--limit N] [--until HH:MM]   # the test model's AUC with
                                                 # and without log-probability scores (bench/judge_logprobs.py)
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data" / "judge_agreement"
TUNE_SHARE = 0.4
SUMMARY_QUESTION = "Summarise the document."


@dataclass(frozen=True)
class Item:
    """One labelled answer: its context passages and whether people judged it fully supported."""

    set: str
    id: str
    group: str  # items of one group (question or source document) stay in one part
    question: str
    passages: tuple[str, ...]
    answer: str
    supported: bool

    @property
    def part(self) -> str:
        digest = int(hashlib.sha256(f"{self.set}/{self.group}".encode()).hexdigest()[:8], 16)
        return "tune" if digest / 0xFFFFFFFF < TUNE_SHARE else "heldout"

    def row(self) -> dict:
        return {"set": self.set, "id": self.id, "group": self.group, "question": self.question,
                "passages": list(self.passages), "answer": self.answer, "supported": self.supported, "part": self.part}


def from_row(row: dict) -> Item:
    return Item(row["set"], row["id"], row["group"], row["question"], tuple(row["passages"]), row["answer"], row["supported"])


Reader = Callable[[str], bytes]  # path in the repository at the source's commit -> its bytes


@dataclass(frozen=True)
class Source:
    repo: str
    commit: str
    licence: str
    kind: str
    labels: str  # how the people's labels became one verdict per item
    load: Callable[[Reader], list[Item]]
    shipped: str = ""  # file under bench/data/judge_agreement/ holding the whole set, when the licence allows


def majority(labels: Sequence[str]) -> str:
    """The label most annotators gave, "" when no label has two votes or more."""
    label, votes = Counter(labels).most_common(1)[0]
    return label if votes >= 2 else ""


def group_of(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


LFQA_SYSTEMS = ("webgpt", "gpt3_wdoc", "gpt3_whudoc", "alpaca_wdoc", "gpt3", "alpaca")


def lfqa(read: Reader) -> list[Item]:
    """Chen et al. 2023, answers of 6 systems to ELI5 questions, every sentence labelled by 3 people
    against the WebGPT documents (the pairing of the authors' src/Automatic/input_file.json)."""
    docs = {d["question_id"]: tuple(doc["text"] for doc in d["docs"]) for d in json.loads(read("data/docs/docs-webgpt.json"))}
    items = []
    for system in LFQA_SYSTEMS:
        for entry in json.loads(read(f"data/annotations/annotations-{system}.json")):
            sentences = [a["answer"].strip() for a in entry["annotations"]]
            supported = all(majority(a["labels"]) == "supported" for a in entry["annotations"])
            items.append(Item("lfqa", f"{system}-{entry['question_id']}", str(entry["question_id"]), entry["question"],
                              docs[entry["question_id"]], " ".join(sentences), supported))
    return items


def qags(variant: str) -> Callable[[Reader], list[Item]]:
    def load(read: Reader) -> list[Item]:
        """Wang et al. 2020, model summaries of news articles, every sentence judged supported or not
        by 3 people."""
        items = []
        for n, line in enumerate(read(f"data/mturk_{variant}.jsonl").decode().splitlines()):
            row = json.loads(line)
            sentences = row["summary_sentences"]
            supported = all(majority([r["response"] for r in s["responses"]]) == "yes" for s in sentences)
            items.append(Item(f"qags_{variant}", f"{variant}-{n}", group_of(row["article"]), SUMMARY_QUESTION,
                              (row["article"],), " ".join(s["sentence"].strip() for s in sentences), supported))
        return items
    return load


FAITHBENCH_BATCHES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 15, 16)


def faithbench(read: Reader) -> list[Item]:
    """Bao et al. 2025, summaries by modern LLMs, hallucinated spans marked by several people."""
    items = []
    for batch in FAITHBENCH_BATCHES:
        for sample in json.loads(read(f"data_for_release/batch_{batch}.json"))["samples"]:
            unwanted = any(label.startswith("Unwanted") for a in sample["annotations"] for label in a["label"])
            items.append(Item("faithbench", f"b{batch}-{sample['sample_id']}", group_of(sample["source"]), SUMMARY_QUESTION,
                              (sample["source"],), sample["summary"].strip(), not unwanted))
    return items


SOURCES = {
    "lfqa": Source("timchen0618/LFQA-Verification", "4e905be93fbe919082d62faa77ee32c68e90237c", "none stated (not shipped)",
                   "long-form QA answers (ELI5) with retrieved web documents",
                   "3 people per answer sentence (supported / partially / not supported); an answer is supported "
                   "when every sentence's majority label is supported", lfqa),
    "qags_cnndm": Source("W4ngatang/qags", "47798e9b63344e2d3fb4df2def6edc18e9402d30", "none stated (not shipped)",
                         "news summaries (CNN/DailyMail)",
                         "3 people per summary sentence (yes / no); a summary is supported when every sentence has a "
                         "majority of yes", qags("cnndm")),
    "qags_xsum": Source("W4ngatang/qags", "47798e9b63344e2d3fb4df2def6edc18e9402d30", "none stated (not shipped)",
                        "news summaries (XSum, one sentence)",
                        "3 people per summary sentence (yes / no); a summary is supported when every sentence has a "
                        "majority of yes", qags("xsum")),
    "faithbench": Source("vectara/FaithBench", "cf89797d82812c23b5d5e5c121f1d9b8983bbbce", "CC BY-NC-SA 4.0 (shipped)",
                         "summaries by 10 modern LLMs, chosen where detectors disagree (hard cases)",
                         "spans marked by 2+ people; a summary is unsupported when anyone marked an Unwanted "
                         "(intrinsic or extrinsic) hallucination; Benign and Questionable count as supported "
                         "(the authors' 'worst' pooling)", faithbench, shipped="faithbench.jsonl"),
}


def snapshot_reader(sources_dir: Path, source: Source) -> Reader | None:
    git_dir = sources_dir / source.repo.replace("/", "+") / "repo"
    if not git_dir.is_dir():
        return None

    def read(path: str) -> bytes:
        return subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{source.commit}:{path}"],
                              capture_output=True, check=True).stdout
    return read


def load_set(name: str, sources_dir: Path) -> list[Item] | None:
    source = SOURCES[name]
    read = snapshot_reader(sources_dir, source)
    if read is not None:
        return source.load(read)
    if source.shipped and (DATA / source.shipped).exists():
        return [from_row(json.loads(line)) for line in (DATA / source.shipped).read_text().splitlines()]
    return None


def roc_auc(scores: Sequence[float], positive: Sequence[bool]) -> float | None:
    """Probability that a positive item scores above a negative one (ties count half): the
    Mann-Whitney statistic over average ranks. None without both classes."""
    s, y = np.asarray(scores, dtype=float), np.asarray(positive, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if not n_pos or not n_neg:
        return None
    ordered = np.sort(s)
    ranks = (np.searchsorted(ordered, s, "left") + np.searchsorted(ordered, s, "right") + 1) / 2  # average ranks over ties
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


_WORD = re.compile(r"[a-z0-9]+")


def overlap(item: Item) -> float:
    """The baseline: the share of the answer's lower-cased `[a-z0-9]+` words (repeats counted) found
    anywhere in its joined context (1 for an answer without a word)."""
    answer = _WORD.findall(item.answer.lower())
    context = set(_WORD.findall(" ".join(item.passages).lower()))
    return sum(w in context for w in answer) / len(answer) if answer else 1.0


BOOTSTRAP = 2000  # resamples of the paired interval


def paired_bootstrap(scores: Sequence[float], baseline: Sequence[float], items: Sequence[Item],
                     resamples: int = BOOTSTRAP, seed: int = 0) -> dict:
    """ROC AUC of `scores` minus that of `baseline` on the same items, and its 95% interval (2.5th and
    97.5th percentiles) over `resamples` resamples of the items' groups (question or document: the
    items of one group are drawn together), both scores on each resample. A resample without both
    classes is drawn again."""
    s, b = np.asarray(scores, dtype=float), np.asarray(baseline, dtype=float)
    y = np.array([i.supported for i in items])
    names = sorted({i.group for i in items})
    members: dict[str, list[int]] = {g: [] for g in names}
    for n, item in enumerate(items):
        members[item.group].append(n)
    index = [np.array(members[g]) for g in names]
    rng = np.random.default_rng(seed)
    differences: list[float] = []
    while len(differences) < resamples:
        chosen = np.concatenate([index[g] for g in rng.integers(0, len(index), len(index))])
        if y[chosen].all() or not y[chosen].any():
            continue
        differences.append(roc_auc(list(s[chosen]), list(y[chosen])) - roc_auc(list(b[chosen]), list(y[chosen])))  # type: ignore[operator]
    low, high = np.percentile(differences, [2.5, 97.5])
    return {"difference": round(roc_auc(list(s), list(y)) - roc_auc(list(b), list(y)), 3),  # type: ignore[operator]
            "interval": [round(float(low), 3), round(float(high), 3)]}


def flag_figures(flags: Sequence[bool], supported: Sequence[bool]) -> dict:
    """Balanced accuracy of the hallucination flag against people's verdicts and its false-alarm
    rate (share of the supported items flagged)."""
    f, ok = np.asarray(flags, dtype=bool), np.asarray(supported, dtype=bool)
    caught = float(f[~ok].mean()) if (~ok).any() else float("nan")
    false_alarm = float(f[ok].mean()) if ok.any() else float("nan")
    return {"balanced_accuracy": round((caught + 1 - false_alarm) / 2, 3), "false_alarm": round(false_alarm, 3),
            "caught": round(caught, 3)}


def figures(verdicts: Sequence[tuple[float, bool]], items: Sequence[Item]) -> dict:
    supported = [item.supported for item in items]
    auc = roc_auc([score for score, _ in verdicts], supported)
    return {"items": len(items), "supported": sum(supported), "roc_auc": None if auc is None else round(auc, 3),
            **flag_figures([flag for _, flag in verdicts], supported)}


class Memo:
    """An embedder that embeds each distinct text once, made only when a text is not known yet; with
    `path`, the vectors are kept in that .npz file between runs (the before/after and tuning runs
    then embed each text once between them)."""

    def __init__(self, make: Callable[[], object], name: str, path: Path | None = None):
        self.make, self.model, self.name, self.path = make, None, name, path
        self.vectors: dict[str, np.ndarray] = {}
        if path is not None and path.exists():
            with np.load(path) as stored:
                self.vectors = dict(zip(json.loads(str(stored["keys"])), stored["vectors"]))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if missing:
            if self.model is None:
                self.model = self.make()
            self.vectors.update(zip(missing, self.model.embed(missing)))  # type: ignore[attr-defined]
        if not texts:
            return np.zeros((0, self.dimension()))
        return np.stack([self.vectors[t] for t in texts])

    def dimension(self) -> int:
        return len(next(iter(self.vectors.values()))) if self.vectors else len(self.embed(["x"])[0])

    def save(self) -> None:
        if self.path is not None and self.vectors:
            keys = list(self.vectors)
            np.savez(self.path, keys=np.array(json.dumps(keys)), vectors=np.stack([self.vectors[k] for k in keys]))


def hits_of(item: Item) -> list:
    from ragexp.types import Chunk, Hit

    return [Hit(Chunk(f"{item.id}#{n}", f"{item.id}/{n}", text), 1.0, n + 1) for n, text in enumerate(item.passages)]


def offline_verdicts(judge, items: Iterable[Item]) -> list[tuple[float, bool]]:
    from ragexp.types import Answer, Question

    verdicts = []
    for item in items:
        j = judge.judge(Question(item.id, item.question, ()), hits_of(item), Answer(item.answer))
        verdicts.append((j.scores["faithfulness"], bool(j.hallucination)))
    return verdicts


def learned_probabilities(judge, items: Iterable[Item]) -> list[float]:
    """judge=offline_learned's hallucination_probability of each item."""
    from ragexp.types import Answer, Question

    return [judge.judge(Question(item.id, item.question, ()), hits_of(item), Answer(item.answer))
            .scores["hallucination_probability"] for item in items]


def scoring_embedder(path: Path | None = None) -> Memo:
    """MiniLM, the default scoring embedder of a run (conf/embedder/minilm.yaml)."""
    def make():
        import torch

        torch.set_num_threads(1)  # one core of the shared two: two threads ran 3x slower under load here
        cfg, build = composed("embedder=minilm")
        return build(cfg.embedder)

    return Memo(make, "minilm", path)


def compose_judge(option: str):
    cfg, build = composed(f"judge={option}")
    return build(cfg.judge) if not option.startswith("offline") else cfg.judge


def composed(*overrides: str):
    """The config as the checkout whose code runs composes it with `overrides`, and its `build`
    (a component's settings are written in its YAML, not in its class)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    try:
        from ragexp.config.build import build
    except ImportError:  # a checkout from before the regrouping (ragexp/run/pipeline.py), or the layout by stage
        try:
            from ragexp.run.pipeline import build  # type: ignore[no-redef]
        except ImportError:
            from ragexp.pipeline import build  # type: ignore[no-redef]

    import ragexp

    conf = Path(ragexp.__file__).resolve().parents[1] / "conf"  # the conf of the checkout whose code runs
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf if conf.is_dir() else ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides))
    return cfg, build


def offline_judge(embedder, **settings):
    """The offline judge with conf/judge/offline.yaml's settings (those this checkout's judge takes),
    `settings` over them."""
    import inspect

    from ragexp.judges.offline import OfflineJudge

    node = compose_judge("offline")
    takes = inspect.signature(OfflineJudge).parameters
    yaml = {k: node[k] for k in node if k in takes and k != "embedder"}
    return OfflineJudge(embedder, **{**yaml, **settings})


def learned_judge(embedder, weights: Path | None = None):
    """judge=offline_learned with conf/judge/offline_learned.yaml's settings (`weights` over its
    file); None in a checkout without it (the "before" figures)."""
    try:
        from ragexp.judges.learned import LearnedOfflineJudge
    except ImportError:
        return None
    node = compose_judge("offline_learned")
    settings = {k: node[k] for k in node if k not in ("_target_", "embedder")}
    return LearnedOfflineJudge(embedder, **{**settings, **({"weights": str(weights)} if weights else {})})


def scripted_server(items: Sequence[Item]):
    """The test server, replying to each judge prompt with the people's verdict on the answer it
    carries (found by its text): judge=llm gets faithfulness 9 / hallucination false for a supported
    answer and 2 / true otherwise; the triad gets the answer's sentences as its claims, each
    verified as the people judged the answer."""
    sys.path.insert(0, str(ROOT / "tests"))
    from openai_server import OpenAIServer, auto_reply, judge_json, numbered, prompt_text, task, user_text

    try:
        from ragexp.base.text import split_sentences
    except ImportError:  # a checkout from before the regrouping (ragexp/text.py)
        from ragexp.text import split_sentences  # type: ignore[no-redef]

    by_answer = {item.answer.strip(): item for item in items}
    def claims_of(text: str) -> tuple[str, ...]:  # as the triad reads them: whitespace normalised
        return tuple(" ".join(s.split()) for s in split_sentences(text))

    by_claims = {claims_of(item.answer): item.supported for item in items}  # one item's claims, in order

    def carried(text: str) -> Item | None:
        found = [answer for answer in by_answer if answer and answer in text]
        return by_answer[max(found, key=len)] if found else None  # the longest: one answer may hold another

    def chat(body: dict):
        kind, text = task(body), prompt_text(body)
        if kind == "judge":
            item = carried(text)
            ok = item is not None and item.supported
            return judge_json(faithfulness=9 if ok else 2, hallucination=not ok)
        if kind == "claims":
            item = carried(text)
            return json.dumps({"claims": split_sentences(item.answer) if item else ["unknown"]})
        if kind == "verification":
            user = user_text(body)
            claims = tuple(" ".join(line.split("] ", 1)[1].split()) for line in user.splitlines()
                           if line.startswith("[") and line.split("] ", 1)[0][1:].isdigit() and "] " in line)
            ok = by_claims.get(claims, False)
            return json.dumps({"verdicts": [{"claim": n, "supported": ok, "reason": "scripted"} for n in numbered(user)]})
        return auto_reply(body)

    return OpenAIServer(chat=chat)


def llm_verdicts(option: str, items: Sequence[Item], work_dir: Path) -> tuple[list[tuple[float, bool]], int]:
    """judge=llm or judge=triad against the scripted server: (faithfulness, flag) per item, and how
    many items failed (their verdict counts as (0, True))."""
    from ragexp.errors import QuestionFailed
    from ragexp.types import Answer, Question

    judge = compose_judge(option)
    cfg, build = composed(f"judge={option}")
    verdicts, failed = [], 0
    with scripted_server(items) as server:
        judge.endpoint = build(cfg.judge.endpoint, base_url=server.base_url, model="gpt-4o-mini", api_key_env=None,
                               backoff_s=0.01)
        session = build(cfg.llm, cache_dir=str(work_dir / f"llm-{option}"))
        session.connect(judge=judge)
        for item in items:
            try:
                j = judge.judge(Question(item.id, item.question, ()), hits_of(item), Answer(item.answer))
            except QuestionFailed:
                failed += 1
                verdicts.append((0.0, True))
                continue
            verdicts.append((j.scores["faithfulness"], float(j.hallucination) > 0))
    return verdicts, failed


def capped(items: Sequence[Item], limit: int | None) -> list[Item]:
    """At most `limit` items, the same ones every time (the first by a hash of their id)."""
    if limit is None or len(items) <= limit:
        return list(items)
    return sorted(items, key=lambda i: hashlib.sha256(i.id.encode()).hexdigest())[:limit]


def agreement(sources_dir: Path, work_dir: Path, llm: bool = True, part: str = "heldout", limit: int | None = None,
              vectors: Path | None = None, weights: Path | None = None, learned_too: bool = True) -> dict:
    """The figures per set on `part` (at most `limit` items of it; see the module's docstring)."""
    embedder = scoring_embedder(vectors)
    judge = offline_judge(embedder)
    learned = learned_judge(embedder, weights) if learned_too else None
    out: dict = {}
    for name, source in SOURCES.items():
        items = load_set(name, sources_dir)
        if items is None:
            out[name] = {"missing": f"fetch github:{source.repo} at {source.commit} into {sources_dir}"}
            continue
        chosen = capped([item for item in items if item.part == part], limit)
        baseline = [overlap(item) for item in chosen]
        auc = roc_auc(baseline, [item.supported for item in chosen])
        entry: dict = {"part": part, "overlap": {"items": len(chosen), "supported": sum(i.supported for i in chosen),
                                           "roc_auc": None if auc is None else round(auc, 3)}}
        started, cpu = time.perf_counter(), time.process_time()
        verdicts = offline_verdicts(judge, chosen)
        entry["offline"] = {**figures(verdicts, chosen), "seconds": round(time.perf_counter() - started, 1),
                            "cpu_s_per_item": round((time.process_time() - cpu) / max(len(chosen), 1), 4),
                            "minus_overlap": paired_bootstrap([v for v, _ in verdicts], baseline, chosen)}
        if learned is not None:
            started = time.perf_counter()
            probability = learned_probabilities(learned, chosen)
            entry["offline_learned"] = figures([(1 - p, p > learned.hallucination_threshold) for p in probability], chosen)
            entry["offline_learned"]["seconds"] = round(time.perf_counter() - started, 1)
            entry["offline_learned"]["minus_overlap"] = paired_bootstrap([1 - p for p in probability], baseline, chosen)
            if part == "heldout":  # the threshold a user would fit on labelled answers of this kind (calibrate --outputs)
                tuning = capped([item for item in items if item.part == "tune"], limit)
                fitted, _ = best_threshold(np.array(learned_probabilities(learned, tuning)),
                                           np.array([not i.supported for i in tuning]), np.array([name] * len(tuning)))
                entry["offline_learned_set_threshold"] = {
                    **figures([(1 - p, p > fitted) for p in probability], chosen), "threshold": fitted}
        embedder.save()
        if llm:
            for option in ("llm", "triad"):
                verdicts, failed = llm_verdicts(option, chosen, work_dir)
                entry[option] = {**figures(verdicts, chosen), "failed": failed}
        out[name] = entry
    return out


# the grids the offline judge's defaults were chosen from, on the tuning part only: first the faithfulness score's
# settings, then (with those) the hallucination flag's. The score's grid runs from the words found alone (0, 0: the
# overlap baseline's reading but for verbatim text and short answers) through small corrections by word pairs and
# numbers to large ones, so the criterion can prefer a score that leans on the words found where pairs and numbers
# do not reliably tell more.
SCORE_GRID = {"pair_weight": (0.0, 0.02, 0.05, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0),
              "number_penalty": (0.0, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.8)}
FLAG_GRID = {"support_threshold": (0.3, 0.4, 0.5, 0.6, 0.7, 0.8), "hallucination_share": (0.0, 0.2, 0.34, 0.5)}
TUNE_RESAMPLES = BOOTSTRAP  # the goal's own interval: with fewer, percentile noise decides between settings


def tune(sources_dir: Path, limit: int | None = None, vectors: Path | None = None) -> dict:
    """The offline judge's settings on the tuning part of every set that can be read, in two steps. The
    faithfulness score's (SCORE_GRID) by the goal it serves, AUC at least overlap's on every kind of
    answer: the best least lower end, over the sets, of the 95% paired bootstrap interval of its AUC
    minus overlap's (TUNE_RESAMPLES resamples); ties: the best mean AUC. Then the flag's (FLAG_GRID):
    the best mean balanced accuracy (ties: fewer false alarms). Each claim's support
    (OfflineJudge.claims) is found once; each setting applies its weights and thresholds to it."""
    import itertools

    from ragexp.judges.offline import to_scale
    from ragexp.types import Answer, Question

    embedder = scoring_embedder(vectors)
    base = offline_judge(embedder)
    support: dict[str, list] = {}
    sets, baseline = {}, {}
    for name in SOURCES:
        items = load_set(name, sources_dir)
        if not items:
            continue
        sets[name] = capped([i for i in items if i.part == "tune"], limit)
        baseline[name] = [overlap(i) for i in sets[name]]
        support[name] = [[s for _, s in base.claims(Question(i.id, i.question, ()), hits_of(i), Answer(i.answer))]
                         for i in sets[name]]
        embedder.save()
        print(f"{name}: support of {len(sets[name])} tuning items", file=sys.stderr, flush=True)

    def verdicts(judge, claims_of_items) -> list[tuple[float, bool]]:
        out = []
        for claims in claims_of_items:
            weights = [max(c.words, 1) for c in claims]
            share = sum(w * judge.score(c) for w, c in zip(weights, claims)) / sum(weights) if claims else 1.0
            out.append((to_scale(share), judge.hallucinates([judge.supports(c) for c in claims])))
        return out

    scored = []
    for values in itertools.product(*SCORE_GRID.values()):
        settings = dict(zip(SCORE_GRID, values))
        judge = offline_judge(embedder, **settings)
        per_set = {}
        for name, items in sets.items():
            scores = [v for v, _ in verdicts(judge, support[name])]
            per_set[name] = {"roc_auc": round(roc_auc(scores, [i.supported for i in items]) or 0.0, 3),
                             "minus_overlap": paired_bootstrap(scores, baseline[name], items, TUNE_RESAMPLES)}
        least = min(f["minus_overlap"]["interval"][0] for f in per_set.values())
        mean = round(float(np.mean([f["roc_auc"] for f in per_set.values()])), 3)
        scored.append({"settings": settings, "least_lower_end": least, "mean_roc_auc": mean, "sets": per_set})
    scored.sort(key=lambda r: (-r["least_lower_end"], -r["mean_roc_auc"]))
    chosen = scored[0]["settings"]
    flagged = []
    for values in itertools.product(*FLAG_GRID.values()):
        settings = {**chosen, **dict(zip(FLAG_GRID, values))}
        judge = offline_judge(embedder, **settings)
        per_set = {name: figures(verdicts(judge, support[name]), items) for name, items in sets.items()}
        mean = {k: round(float(np.mean([f[k] for f in per_set.values()])), 3) for k in ("balanced_accuracy", "false_alarm")}
        flagged.append({"settings": settings, "mean": mean, "sets": per_set})
    flagged.sort(key=lambda r: (-r["mean"]["balanced_accuracy"], r["mean"]["false_alarm"]))
    return {"chosen": flagged[0]["settings"], "score": scored, "flag": flagged}


def item_features(judge, item: Item) -> dict[str, float]:
    """The learned verifier's features of one item (ragexp.judges.learned.verifier_features), through
    `judge`'s embedder and claim evidence, as judge=offline_learned computes them."""
    from ragexp.judges.learned import verifier_features
    try:
        from ragexp.base.text import split_sentences
    except ImportError:  # a checkout from before the regrouping (ragexp/text.py)
        from ragexp.text import split_sentences  # type: ignore[no-redef]

    sentences = [split_sentences(p) for p in item.passages]
    c = judge.embedder.embed([s for ss in sentences for s in ss])
    a = judge.embedder.embed(split_sentences(item.answer))
    return verifier_features(judge, item.passages, sentences, item.answer, c, a)


def feature_table(sources_dir: Path, part: str, vectors: Path | None = None, limit: int | None = None,
                  sets: Sequence[str] = tuple(SOURCES)) -> dict:
    """Per set of `sets`: the items of `part` and their verifier features, {set: (items, [features])}."""
    embedder = scoring_embedder(vectors)
    judge = learned_judge(embedder)  # the embedding evidence the verifier reads (ragexp.judges.learned)
    table = {}
    for name in sets:
        items = load_set(name, sources_dir)
        if not items:
            continue
        chosen = capped([i for i in items if i.part == part], limit)
        table[name] = (chosen, [item_features(judge, i) for i in chosen])
        embedder.save()
        print(f"{name}: features of {len(chosen)} {part} items", file=sys.stderr, flush=True)
    return table


LEARN_C = (0.01, 0.1, 1.0, 10.0)  # the logistic model's inverse regularisation strengths tried on the tuning part
THRESHOLDS = tuple(round(t, 2) for t in np.linspace(0.05, 0.95, 91))


def best_threshold(probability: np.ndarray, unsupported: np.ndarray, sets: np.ndarray) -> tuple[float, float]:
    """The flag threshold with the best mean balanced accuracy over the sets (ties: the lowest), and that mean."""
    def mean_balanced(t: float) -> float:
        return float(np.mean([flag_figures(probability[sets == s] > t, ~unsupported[sets == s])["balanced_accuracy"]
                              for s in np.unique(sets)]))
    best = max(THRESHOLDS, key=lambda t: (mean_balanced(t), -t))
    return best, mean_balanced(best)


def monotone_logistic(x: np.ndarray, y: np.ndarray, weight: np.ndarray, c: float,
                      support: Sequence[bool]) -> tuple[np.ndarray, float]:
    """A weighted logistic regression with an L2 penalty (1 / 2C) on its weights, fitted by
    L-BFGS-B with the weight of every `support` feature at most 0: more support never raises the
    probability of "not supported". Returns (weights, bias)."""
    from scipy.optimize import minimize

    y = y.astype(float)

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[:-1], theta[-1]
        z = b + x @ w
        p = 1.0 / (1.0 + np.exp(-z))
        value = float(np.sum(weight * (np.logaddexp(0.0, z) - y * z)) + w @ w / (2 * c))
        residual = weight * (p - y)
        return value, np.append(x.T @ residual + w / c, residual.sum())

    bounds = [(None, 0.0) if s else (None, None) for s in support] + [(None, None)]
    found = minimize(loss, np.zeros(x.shape[1] + 1), jac=True, method="L-BFGS-B", bounds=bounds,
                     options={"maxiter": 5000})
    return found.x[:-1], float(found.x[-1])


def learn(table: dict, folds: int = 5) -> tuple[dict, dict]:
    """The verifier fitted on the pooled tuning items of `table` (see feature_table): standardised
    features, a logistic model with every set and class weighing the same and monotone in the
    support features (`monotone_logistic`), whose C is chosen from LEARN_C and whose threshold is chosen
    by grouped cross-validation on the same tuning items (out-of-fold probabilities, the best mean
    balanced accuracy over the sets); then refitted on all of them. Returns the model as JSON (for
    ragexp.judges.verifier.Verifier) and what cross-validation saw."""
    from sklearn.model_selection import GroupKFold

    from ragexp.judges.verifier import SUPPORT_FEATURES, Verifier

    rows = [(name, item, f) for name, (items, features) in table.items() for item, f in zip(items, features)]
    names = tuple(rows[0][2])
    x = np.array([[f[n] for n in names] for _, _, f in rows])
    unsupported = np.array([not item.supported for _, item, _ in rows])
    sets = np.array([name for name, _, _ in rows])
    groups = np.array([f"{name}/{item.group}" for name, item, _ in rows])

    def fit(train: np.ndarray, c: float):
        mean, scale = x[train].mean(0), x[train].std(0)
        scale[scale < 1e-9] = 1.0
        # every set and class weighs the same, as in the criterion (the mean of per-set balanced accuracies)
        cells = Counter(zip(sets[train], unsupported[train]))
        weight = np.array([1.0 / cells[(s, u)] for s, u in zip(sets[train], unsupported[train])])
        w, b = monotone_logistic((x[train] - mean) / scale, unsupported[train], weight * len(weight) / weight.sum(),
                                 c, [n in SUPPORT_FEATURES for n in names])
        return mean, scale, w, b

    def predict(model, index: np.ndarray) -> np.ndarray:
        mean, scale, w, b = model
        return 1.0 / (1.0 + np.exp(-(b + ((x[index] - mean) / scale) @ w)))

    seen = {}
    for c in LEARN_C:
        out_of_fold = np.zeros(len(rows))
        for train, test in GroupKFold(folds).split(x, unsupported, groups):
            out_of_fold[test] = predict(fit(train, c), test)
        threshold, balanced = best_threshold(out_of_fold, unsupported, sets)
        per_set = {s: figures([(1 - p, p > threshold) for p in out_of_fold[sets == s]],
                              [item for name, item, _ in rows if name == s]) for s in table}
        seen[c] = {"threshold": float(threshold), "mean_balanced_accuracy": round(float(balanced), 3), "sets": per_set}
    c = max(LEARN_C, key=lambda k: (seen[k]["mean_balanced_accuracy"], -k))  # ties: the stronger regularisation
    mean, scale, w, b = fit(np.arange(len(rows)), c)
    about = {"fitted_on": {s: int((sets == s).sum()) for s in table}, "C": c, "folds": folds,
             "threshold_from": "out-of-fold probabilities on the tuning part (bench/judge_agreement.py learn)",
             "embedder": "minilm", "weighting": "each set and class equally",
             "monotone": "weights of the support features at most 0"}
    verifier = Verifier(names, mean, scale, w, b, seen[c]["threshold"], about)
    return verifier.to_json(), {"chosen_C": c, "cross_validation": {str(k): v for k, v in seen.items()}}


def where_to_get() -> str:
    """The repositories and commits the sets are read from, as one phrase."""
    repos = dict.fromkeys((s.repo, s.commit) for s in SOURCES.values())
    return ", ".join(f"github.com/{repo} at {commit}" for repo, commit in repos)


def sources_dir_of(args) -> Path:
    """The folder of the sets' git snapshots: `--sources`, else $RAGEXP_AGREEMENT_SOURCES; neither
    given, or not a folder: one line saying how to get them, exit 2."""
    given = getattr(args, "sources", None) or os.environ.get("RAGEXP_AGREEMENT_SOURCES")
    if not given or not Path(given).is_dir():
        print(f"judge_agreement: {'no folder ' + str(given) if given else 'no labelled sets given'}: clone "
              f"{where_to_get()} as DIR/<owner>+<name>/repo (git clone --bare), then pass --sources DIR or set "
              "RAGEXP_AGREEMENT_SOURCES=DIR", file=sys.stderr)
        raise SystemExit(2)
    return Path(given)


def measure(work_dir: Path, args) -> dict:
    """bench/run.py's entry: the held-out figures of every judge, per set."""
    limit = getattr(args, "agreement_limit", None)
    return {**agreement(sources_dir_of(args), work_dir, limit=limit), "tune_share": TUNE_SHARE, "limit": limit}


def write_shipped(sources_dir: Path) -> None:
    """bench/data/judge_agreement/<set>.jsonl for the sets whose licence allows it (the whole set,
    each row with its part), and tests/data/judge_agreement_sample.jsonl: 36 tuning items of them."""
    sample = []
    for source in SOURCES.values():
        if not source.shipped:
            continue
        read = snapshot_reader(sources_dir, source)
        if read is None:
            raise SystemExit(f"judge_agreement: no snapshot of {source.repo} under {sources_dir}")
        items = source.load(read)
        DATA.mkdir(parents=True, exist_ok=True)
        (DATA / source.shipped).write_text("".join(json.dumps(i.row()) + "\n" for i in items))
        tuning = [i for i in items if i.part == "tune"]
        sample += [i for i in tuning if i.supported][:18] + [i for i in tuning if not i.supported][:18]
    target = ROOT / "tests" / "data" / "judge_agreement_sample.jsonl"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("".join(json.dumps(i.row()) + "\n" for i in sample))


def markdown(after: dict, before: dict | None = None) -> str:
    """The figures as a Markdown table, one row per set and judge, overlap first (with `before`, the
    figures of another checkout, each judge's row before and after)."""
    lines = ["| set | held-out items (supported) | judge | ROC AUC | AUC - overlap [95% paired bootstrap] | balanced accuracy "
             "| false alarms | caught |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, entry in after.items():
        if not isinstance(entry, dict):
            continue
        if "missing" in entry:
            lines.append(f"| {name} | missing: {entry['missing']} | | | | | | |")
            continue
        if "overlap" in entry:
            lines.append(f"| {name} | {entry['overlap']['items']} ({entry['overlap']['supported']}) | overlap | "
                         f"{entry['overlap']['roc_auc']} | | | | |")
        for judge in ("offline", "offline_learned", "offline_learned_set_threshold", "llm", "triad"):
            rows = [("before", (before or {}).get(name, {}).get(judge)), ("after" if before else "", entry.get(judge))]
            for label, now in rows:
                if not now:
                    continue
                margin = now.get("minus_overlap")
                interval = f"{margin['difference']:+.3f} [{margin['interval'][0]:+.3f}, {margin['interval'][1]:+.3f}]" if margin else ""
                cells = " | ".join(str(now[k]) for k in ("balanced_accuracy", "false_alarm", "caught"))
                named = judge + (" (scripted path)" if judge in ("llm", "triad") else "") + (f" ({label})" if label else "")
                lines.append(f"| {name} | {now['items']} ({now['supported']}) | {named} | {now['roc_auc']} | {interval} | {cells} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("figures", "tune", "learn", "ship", "table", "logprobs"))
    parser.add_argument("files", nargs="*", type=Path, help="table: the figures' JSON (after, then before)")
    parser.add_argument("--sources", type=Path, help="folder of the sets' git snapshots (<owner>+<name>/repo); "
                        "default: $RAGEXP_AGREEMENT_SOURCES, one of them required")
    parser.add_argument("--no-llm", action="store_true", help="figures: no LLM judge (scripted server)")
    parser.add_argument("--no-learned", action="store_true", help="figures: no judge=offline_learned")
    parser.add_argument("--part", choices=("heldout", "tune"), default="heldout")
    parser.add_argument("--limit", type=int, help="at most this many items per set and part (the same ones every time)")
    parser.add_argument("--vectors", type=Path, help="an .npz file keeping MiniLM's vectors between runs")
    parser.add_argument("--sets", help="learn: fit on the tuning parts of these sets only (comma-separated; "
                        "default: all), e.g. to measure a set the verifier never saw")
    parser.add_argument("--weights", type=Path, help="learn: where to write the verifier (default: the shipped file); "
                        "figures: the verifier judge=offline_learned reads (default: the shipped file)")
    parser.add_argument("--work", type=Path, help="logprobs: the folder of its journal and reply cache (a run goes on from it)")
    parser.add_argument("--until", help="logprobs: start no item after this UTC time (HH:MM); report the items judged")
    parser.add_argument("--out", type=Path, help="logprobs: a results JSON whose `logprobs` key gets the figures")
    args = parser.parse_args()
    if args.command == "logprobs":
        logprobs_command(args)
    elif args.command == "tune":
        print(json.dumps(tune(sources_dir_of(args), args.limit, args.vectors), indent=1))
    elif args.command == "learn":
        from ragexp.judges.verifier import SHIPPED

        chosen = args.sets.split(",") if args.sets else list(SOURCES)
        unknown = sorted(set(chosen) - set(SOURCES))
        if unknown:
            parser.error(f"--sets: no set {', '.join(unknown)} (the sets: {', '.join(SOURCES)})")
        model, seen = learn(feature_table(sources_dir_of(args), "tune", args.vectors, args.limit, chosen))
        target = args.weights or SHIPPED
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(model, indent=1) + "\n")
        print(json.dumps({"written": str(target), **seen}, indent=1))
    elif args.command == "table":
        after, *before = [json.loads(f.read_text()) for f in args.files]
        print(markdown(after, before[0] if before else None), end="")
    elif args.command == "ship":
        write_shipped(sources_dir_of(args))
    else:
        print(json.dumps(agreement(sources_dir_of(args), Path(tempfile.mkdtemp(prefix="ragexp-agreement-")),
                                   llm=not args.no_llm, part=args.part, limit=args.limit, vectors=args.vectors,
                                   weights=args.weights, learned_too=not args.no_learned), indent=1))


def logprobs_command(args) -> None:
    """`logprobs`: the test model's AUC with and without log-probability scores (bench/judge_logprobs.py)."""
    import judge_logprobs

    if args.work is None:
        raise SystemExit("judge_agreement logprobs: --work FOLDER is needed (its journal lets a stopped run go on)")
    until = None
    if args.until:
        hour, _, minute = args.until.partition(":")
        import calendar

        until = float(calendar.timegm((*time.gmtime()[:3], int(hour), int(minute or 0), 0)))
    found = judge_logprobs.measure(sources_dir_of(args), args.work, args.limit, until)
    if args.out:
        results = json.loads(args.out.read_text()) if args.out.exists() else {}
        results["logprobs"] = found
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(found, indent=1))
    print(judge_logprobs.markdown(found), end="")


if __name__ == "__main__":
    main()
