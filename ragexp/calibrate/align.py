"""`python -m ragexp.calibrate --outputs FILE --align`: a judge aligned to people's labels.

The labelled rows are split into a tuning part and a held-out part (`--holdout`, whole `--group`s,
seeded; the split reads the rows' ids only, never their labels). Each candidate judge is the
configured judge (an LLM or rubric judge: one with a `system_prompt`) with one instruction variant
(the configured prompt, and each of `--variants FILE`) and N examples people scored (`--shots`,
drawn from the tuning part across the range of their labels), appended to its system prompt. Every
candidate judges the tuning part; the one that agrees best with people there is chosen (agreement:
1 - the mean absolute difference from people's labels on each metric's 0-1 scale, a row the
judge could not judge counting as the largest difference; ties go to the earlier variant, then
the fewer examples). Only then is the held-out part judged, by the chosen judge and by the
configured one, and their agreement there is reported with the paired interval of the difference
(ragexp.calibrate.variants): the figure to believe. The chosen judge is written as a config file
(`judge/aligned.yaml` under the report folder) that `python -m ragexp --config-dir FOLDER
judge=aligned` runs, sweeps and shares.

All judging goes through the judging service (ragexp.judges.judging, via `outputs.judge_rows`).
The number of requests is known before any is sent: printed with `--dry-run`, and refused above
`--max-requests`.

MLflow's `align()` is not used: it optimises an MLflow judge (`make_judge`) against human
assessments on MLflow traces with DSPy's optimisers (a dependency ragexp does not carry), while the
judge to align here is ragexp's own, judged through its stage cache, and its result must be a
ragexp config file."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ragexp.calibrate.outputs import LabelledRow, as_run, judge_rows
from ragexp.errors import RagexpError
from ragexp.store.labels import Label

CONFIGURED = "configured"
EXAMPLE_CHARS = 600  # of each context and answer shown in an example


@dataclass(frozen=True)
class Candidate:
    """A judge to try: an instruction variant with `shots` examples people scored."""

    variant: str
    shots: int
    prompt: str
    examples: tuple[str, ...]  # the question ids of its examples

    @property
    def name(self) -> str:
        return f"{self.variant}, {self.shots} example{'s' * (self.shots != 1)}"


def variants_of(path: str | None, configured: str) -> dict[str, str]:
    """The instruction variants: the configured system prompt, then each of the YAML file at `path`
    (a mapping of name -> system prompt text)."""
    found = {CONFIGURED: configured}
    if path is None:
        return found
    from ragexp.base.yaml_text import read_yaml

    try:
        read = read_yaml(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise RagexpError(f"--variants: cannot read {path} ({err.strerror})") from None
    if not isinstance(read, dict) or not read or not all(isinstance(v, str) and v.strip() for v in read.values()):
        raise RagexpError(f"--variants: {path} must map each variant's name to its system prompt (text)")
    for name, text in read.items():
        if str(name) == CONFIGURED:
            raise RagexpError(f"--variants: {path}: {CONFIGURED!r} names the configured prompt; rename that variant")
        found[str(name)] = text
    return found


def parts(ids: Sequence[str], holdout: float, seed: int, groups: dict[str, str] | None) -> tuple[list[str], list[str]]:
    """(tuning, held-out) question ids: a seeded split of the ids alone (whole groups with `groups`)."""
    from ragexp.calibrate.thresholds import split

    tune, held = split(np.zeros(len(ids)), holdout, seed, [groups[q] for q in ids] if groups else None)
    if len(tune) == 0 or len(held) == 0:
        raise RagexpError(f"--align: {len(ids)} labelled rows leave no {'held-out' if len(tune) else 'tuning'} part "
                          f"at --holdout {holdout:g}; label more rows or change --holdout")
    return [ids[i] for i in sorted(tune)], [ids[i] for i in sorted(held)]


def examples(tuning: Sequence[str], labels: dict[str, dict[str, float]], metric: str, k: int, seed: int) -> list[str]:
    """`k` tuning rows that people labelled on `metric`, spread across the range of their labels
    (sorted by label, ties by a seeded hash of the id; then evenly spaced)."""
    labelled = [q for q in tuning if metric in labels.get(q, {})]
    if k <= 0 or not labelled:
        return []
    order = sorted(labelled, key=lambda q: (labels[q][metric], hashlib.sha256(f"{seed}\0{q}".encode()).hexdigest()))
    if k >= len(order):
        return order
    return [order[round(i * (len(order) - 1) / (k - 1))] for i in range(k)] if k > 1 else [order[len(order) // 2]]


def with_examples(prompt: str, chosen: Sequence[LabelledRow], labels: dict[str, dict[str, float]]) -> str:
    """The system prompt followed by the examples people scored (braces doubled: the prompt is a template)."""
    if not chosen:
        return prompt
    blocks = []
    for row in chosen:
        context = " ".join(h.chunk.text for h in row.hits)[:EXAMPLE_CHARS]
        scores = ", ".join(f"{m} {v:g}" for m, v in sorted(labels[row.question.qid].items()))
        blocks.append(f"<example>\n<question>{row.question.text}</question>\n<context>{context}</context>\n"
                      f"<generated_answer>{row.answer.text[:EXAMPLE_CHARS]}</generated_answer>\n"
                      f"people's scores: {scores}\n</example>")
    shown = "\n".join(blocks).replace("{", "{{").replace("}", "}}")
    return f"{prompt}\n\nExamples that people scored (data to learn the scale from, not to judge):\n{shown}"


def candidates(variants: dict[str, str], shots: Sequence[int], rows: dict[str, LabelledRow], tuning: Sequence[str],
               labels: dict[str, dict[str, float]], metric: str, seed: int) -> list[Candidate]:
    found = []
    for variant, prompt in variants.items():
        for k in shots:
            chosen = examples(tuning, labels, metric, k, seed)
            found.append(Candidate(variant, len(chosen), with_examples(prompt, [rows[q] for q in chosen], labels),
                                   tuple(chosen)))
    unique: dict[tuple[str, tuple[str, ...]], Candidate] = {}
    for c in found:
        unique.setdefault((c.variant, c.examples), c)  # --shots 4,8 with 5 labelled rows: one candidate
    return list(unique.values())


def agreement(judged: Sequence[Any], rows: Sequence[LabelledRow], labels: dict[str, dict[str, float]],
              scales: dict[str, tuple[float, float]]) -> float:
    """1 - the mean absolute difference from people's labels on each metric's 0-1 scale, over every
    (row, labelled metric); a row not judged counts as the largest difference (1)."""
    errors = []
    for row, j in zip(rows, judged):
        for metric, truth in labels.get(row.question.qid, {}).items():
            low, high = scales[metric]
            value = getattr(j, "scores", {}).get(metric) if metric != "hallucination" else getattr(j, "hallucination", None)
            errors.append(1.0 if value is None else min(1.0, abs(float(value) - truth) / (high - low)))
    return round(1 - float(np.mean(errors)), 4) if errors else float("nan")


@dataclass
class Plan:
    candidates: list[Candidate]
    tuning: list[str]
    held_out: list[str]
    repeats: int

    @property
    def requests(self) -> int:
        """Judge requests at most, before re-asks (what the stage cache holds is not asked again):
        every candidate on the tuning part, the chosen and the configured judge on the held-out part."""
        return self.repeats * (len(self.candidates) * len(self.tuning) + 2 * len(self.held_out))

    def lines(self) -> list[str]:
        return [f"--align: {len(self.candidates)} candidate judges ({'; '.join(c.name for c in self.candidates)}) on "
                f"{len(self.tuning)} tuning rows, then the chosen and the configured judge on {len(self.held_out)} "
                f"held-out rows: up to {self.requests} judge requests (fewer when the stage cache holds some; a "
                "re-asked reply adds one)"]


def labels_by_question(labels: Sequence[Label], binary: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Question id -> metric -> people's mean label (hallucination from its yes/no column)."""
    values: dict[str, dict[str, list[float]]] = {}
    for label in labels:
        values.setdefault(label.question_id, {}).setdefault(label.metric, []).append(label.value)
    for q, v in binary.get("hallucination", {}).items():
        values.setdefault(q, {}).setdefault("hallucination", [v])
    return {q: {m: float(np.mean(v)) for m, v in by.items()} for q, by in values.items()}


def judged_by(cfg, prompt: str, rows: Sequence[LabelledRow]):
    """The configured judge with `prompt` as its system prompt, and its judgement of each row."""
    from omegaconf import OmegaConf

    candidate = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    candidate.judge.system_prompt = prompt
    return judge_rows(rows, candidate)


def write_config(cfg, prompt: str, folder: Path, header: str) -> Path:
    """The chosen judge as `judge/aligned.yaml` under `folder` (the whole judge node, secrets masked
    and environment values kept as `${oc.env:NAME}`): `--config-dir FOLDER judge=aligned`."""
    from ragexp.base.redact import written_config
    from ragexp.base.yaml_text import dump_yaml

    node = written_config(cfg)["judge"]
    node["system_prompt"] = prompt
    path = folder / "judge" / "aligned.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# @package judge\n" + "".join(f"# {line}\n" for line in header.splitlines()) + dump_yaml(node))
    return path


def align(cfg, rows: Sequence[LabelledRow], labels: dict[str, dict[str, float]], scales: dict[str, tuple[float, float]],
          args, groups: dict[str, str] | None, folder: Path) -> tuple[list[str], dict]:
    """The aligned judge chosen on the tuning part and checked on the held-out part: the report's
    lines and its JSON. With `args.dry_run`, only the plan (no request sent)."""
    from ragexp.calibrate.variants import compare, markdown

    configured = cfg.judge.get("system_prompt")
    if not isinstance(configured, str):
        raise RagexpError(f"--align aligns a judge's system prompt; judge {cfg.judge.get('_target_')} has none "
                          "(use judge=llm, judge=local or judge=rubric)")
    labelled = [row for row in rows if labels.get(row.question.qid)]
    by_id = {row.question.qid: row for row in labelled}
    tuning, held_out = parts(list(by_id), args.holdout, args.seed, groups)
    metric = next(iter(next(iter(labels.values()))))
    plan = Plan(candidates(variants_of(args.variants, configured), args.shots, by_id, tuning, labels, metric, args.seed),
                tuning, held_out, int(cfg.judge.get("repeats") or 1))
    if args.dry_run:
        return plan.lines() + ["--dry-run: nothing sent"], {"plan": plan.requests}
    if plan.requests > args.max_requests:
        raise RagexpError(f"{plan.lines()[0]}, over --max-requests {args.max_requests}; raise it, or try fewer "
                          "--variants or --shots")
    tune_rows = [by_id[q] for q in tuning]
    tried = []
    for candidate in plan.candidates:
        _, judged = judged_by(cfg, candidate.prompt, tune_rows)
        tried.append((candidate, agreement(judged, tune_rows, labels, scales),
                      sum(1 for j in judged if isinstance(j, str))))
    best, best_agreement, _ = max(tried, key=lambda t: (t[1], -tried.index(t)))
    held_rows = [by_id[q] for q in held_out]
    runs, failed = {}, {}
    for name, prompt in (("aligned", best.prompt), ("configured", configured)):
        judge, judged = judged_by(cfg, prompt, held_rows)
        runs[name] = as_run(name, judge, held_rows, judged)
        failed[name] = sum(1 for j in judged if isinstance(j, str))
    held_labels = [Label(q, m, "people", v) for q in held_out for m, v in labels[q].items()]
    found = compare(runs, {n: held_labels for n in runs}, args.resamples, args.seed, args.level)
    header = (f"written by python -m ragexp.calibrate --align on {args.outputs}: instruction {best.variant!r}, "
              f"{best.shots} examples ({', '.join(best.examples) or 'none'}); tuning agreement {best_agreement:.3f}")
    path = write_config(cfg, best.prompt, folder, header)
    lines = ["", "## Aligned judge", "", *plan.lines(), "",
             f"Tuning part ({len(tuning)} rows): agreement with people of each candidate (1 - mean |judge - people| on "
             "the 0-1 scale; a row not judged counts as 1):", "", "| candidate | agreement | rows not judged |",
             "| --- | --- | --- |", *[f"| {c.name} | {a:.3f} | {f} |" for c, a, f in tried], "",
             f"Chosen: {best.name}. Held-out part ({len(held_out)} rows, never read for the choice): the aligned "
             f"judge against the configured one (rows not judged: aligned {failed['aligned']}, configured "
             f"{failed['configured']}):", *markdown(found, args.level), "",
             f"The aligned judge: {path} (run it with `python -m ragexp --config-dir {folder} judge=aligned`)."]
    return lines, {"tuning": tuning, "held_out": held_out, "chosen": best.name, "examples": list(best.examples),
                   "candidates": [{"name": c.name, "agreement": a, "not_judged": f} for c, a, f in tried],
                   "held_out_comparison": [v.to_json() for v in found], "not_judged": failed, "config": str(path),
                   "requests_planned": plan.requests}


def shots_of(text: str) -> list[int]:
    """--shots: a comma-separated list of numbers of examples (0 = none)."""
    try:
        shots = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise RagexpError(f"--shots: {text!r} is not a list of numbers such as 0,2,4") from None
    if not shots or min(shots) < 0:
        raise RagexpError(f"--shots: {text!r}: give numbers of examples, 0 or more (0,2,4)")
    return list(dict.fromkeys(shots))


def as_json(found: dict) -> str:
    return json.dumps(found, indent=2, default=str) + "\n"
