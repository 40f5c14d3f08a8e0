"""People's labels as a judge: the expensive judge of a cascade (`judge=cascade
judge@judge.expensive=people judge.expensive.labels=FILE`), when people, not an LLM, judge the
questions the cascade draws. Their labels are read, not asked for: from a labels file (the sheet a
cascade run writes, `labels_wanted.csv`, filled in; or any file `python -m ragexp.calibrate`
reads) or, with `labels=mlflow`, from the answers reviewers gave in MLflow's Review tab on the
question records of run `run` (ragexp.store.reviews). Each label is on the cheap judge's scale
of its metric (`hallucination`: yes/no); several annotators' labels of one question are averaged."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ragexp.errors import QuestionFailed, RagexpError
from ragexp.judges.contract import Judge, Run
from ragexp.types import Answer, Hit, Judgement, Question, QuestionResult

FROM_MLFLOW = "mlflow"
HALLUCINATION = "hallucination"
WANTED = "cheap; drawn, no label yet"  # the judged_by of a drawn question people have not labelled yet
NO_LABEL = "no label yet"  # a drawn question people have not labelled: listed in the run folder's WANTED_SHEET
WANTED_SHEET = "labels_wanted.csv"


class PeopleJudge(Judge):
    """`labels`: a CSV or JSONL labels file (question_id and a column per metric, or question_id,
    metric, label; an `annotator` column optional), or `mlflow` with `run` the MLflow run whose
    question records people labelled (on the store `tracking_uri`, default: MLflow's own). A file
    that does not exist yet holds no label: a first run then lists what to label."""

    kind = "people"
    only_in_cascade = ("judge=people: people's labels judge the sample of a cascade: judge=cascade "
                       "judge@judge.expensive=people judge.expensive.labels=FILE")

    def __init__(self, labels: str | None, run: str | None, tracking_uri: str | None,
                 name: str):
        self.labels, self.run, self.tracking_uri, self.name = str(labels or ""), run, tracking_uri, name
        self.metrics: tuple[str, ...] = ()
        self.scales: dict[str, tuple[float, float]] = {}
        self.needs_reference: tuple[str, ...] = ()
        self.scorecard: dict[str, str] = {}
        self.flags_hallucination = True

    def adopt(self, cheap: Judge) -> None:
        """People label the cheap judge's metrics, on its scales (checked as the cascade is built)."""
        if not self.labels:
            raise RagexpError("judge.expensive.labels: name people's labels: a CSV or JSONL file (one that does not "
                              "exist yet is where a first run's drawn questions go to be labelled), or mlflow")
        if self.labels == FROM_MLFLOW and not self.run:
            raise RagexpError("judge.expensive.run: labels=mlflow reads the labels people gave on a run's question "
                              "records in MLflow: name that run (judge.expensive.run=RUN_ID)")
        self.metrics, self.scales = tuple(cheap.metrics), dict(cheap.scales)
        self.needs_reference = tuple(cheap.needs_reference)
        self.needs_contexts = tuple(cheap.needs_contexts)
        self.flags_hallucination = cheap.flags_hallucination

    def where(self) -> str:
        if self.labels == FROM_MLFLOW:
            return f"MLflow run {self.run}'s reviews"
        return self.labels if Path(self.labels).exists() else f"{self.labels}, no such file yet"

    def given(self, questions: set[str]) -> dict[str, dict[str, float]]:
        """question id -> metric -> people's label (the mean over annotators), of these questions; a
        label of another question, off its scale or of a metric the cheap judge lacks stops the run
        with one message listing them all (file:line, or the trace and the reviewer)."""
        from ragexp.store.labels import Labelled, from_file, listed, means

        scales = {**self.scales, **({HALLUCINATION: (0.0, 1.0)} if self.flags_hallucination else {})}
        if self.labels == FROM_MLFLOW:
            labels, problems = self.reviewed(scales, questions)
            if problems:
                raise RagexpError(listed("judge.expensive: labels from MLflow", problems))
        elif not Path(self.labels).exists():
            return {}
        else:
            labels = from_file(self.labels, [Labelled("", "this run", frozenset(questions), scales,
                                                      "the cascade's cheap judge")], "judge.expensive.labels")
        by_question: dict[str, dict[str, float]] = {}
        for metric, values in means(labels).get(labels[0].run if labels else "", {}).items():
            for qid, value in values.items():
                by_question.setdefault(qid, {})[metric] = value
        return by_question

    def reviewed(self, scales: dict[str, tuple[float, float]], questions: set[str]):
        import mlflow

        from ragexp.store.reviews import human_labels

        if self.tracking_uri:
            mlflow.set_tracking_uri(self.tracking_uri)
        try:
            experiment_id = mlflow.MlflowClient().get_run(self.run).info.experiment_id
        except mlflow.exceptions.MlflowException:
            raise RagexpError(f"judge.expensive.run: no run {self.run} in the MLflow store at "
                              f"{mlflow.get_tracking_uri()} (set judge.expensive.tracking_uri)") from None
        return human_labels(str(self.run), experiment_id, scales, questions)

    def judgement(self, labels: dict[str, float]) -> Judgement:
        """A question's labels as the judgement people gave it."""
        flag = labels.get(HALLUCINATION)
        return Judgement(self.name, {m: v for m, v in labels.items() if m != HALLUCINATION},
                         None if flag is None else flag >= 0.5, "people's label", {})

    def judge(self, question: Question, hits: Sequence[Hit], answer: Answer) -> Judgement:
        raise RagexpError(self.only_in_cascade)

    def judge_all(self, items: Sequence[QuestionResult], run: Run) -> list[Judgement | QuestionFailed]:
        """The questions a cascade drew, each with the judgement people's labels give it, or the failure
        `NO_LABEL` (read, not asked: no cache, no concurrency); notes say how many are labelled, what is
        left to label and what is not used. Labels are checked against every question of the run."""
        given = self.given(set(run.questions))
        out: list[Judgement | QuestionFailed] = [self.judgement(given[r.question.qid]) if r.question.qid in given
                                                 else QuestionFailed(NO_LABEL) for r in items]
        wanted = sum(not isinstance(j, Judgement) for j in out)
        unused = len(set(given) - {r.question.qid for r in items})
        run.note(f"judge=cascade: people's labels ({self.where()}): {len(items) - wanted} of the {len(items)} drawn "
                 "questions labelled")
        if wanted:
            run.note(f"judge=cascade: {wanted} drawn questions have no label yet: they are in the run folder's "
                     f"{WANTED_SHEET}; fill it in and pass it as judge.expensive.labels (a rerun draws the same questions; "
                     "until then the estimate leaves them out, as if they were like the labelled ones)")
        if unused:
            run.note(f"judge=cascade: {unused} labelled questions were not drawn and are not used (an estimate "
                     "corrects with the drawn questions only, whose chance of being drawn is known)")
        return out

    def run_files(self, results: Sequence[QuestionResult]) -> dict[str, str]:
        """The drawn questions people have not labelled yet as a sheet to fill in, `labels_wanted.csv`
        in the run folder: what the judge saw and an empty column per metric of the cheap judge (a
        labels file as `judge.expensive.labels` reads it); no file when every drawn question is labelled."""
        import csv
        import io

        wanted = [r for r in results if r.judgement is not None and r.judgement.details.get("judged_by") == WANTED]
        if not wanted:
            return {}
        metrics = [key[: -len("_cheap")] for key in wanted[0].judgement.scores if key.endswith("_cheap")]  # type: ignore[union-attr]
        sheet = io.StringIO()
        writer = csv.writer(sheet)
        writer.writerow(["question_id", "annotator", "question", "context", "expected_answer", "generated_answer", *metrics])
        for r in wanted:
            context = "\n\n".join(f"[Doc {n}] {h.chunk.text}" for n, h in enumerate(r.hits, start=1))
            writer.writerow([r.question.qid, "", r.question.text, context, " | ".join(r.question.answers),
                             r.answer.text if r.answer else "", *[""] * len(metrics)])
        return {WANTED_SHEET: sheet.getvalue()}

