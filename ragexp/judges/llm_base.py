"""What the LLM judges share: sampling settings, the re-ask prompt, and judging N times."""
from __future__ import annotations

import json
import statistics
from typing import Sequence

from ragexp.judges.contract import Judge
from ragexp.llm.client import ChatRequest, JsonMode, parse_json_mode
from ragexp.llm.component import AsksForJSON
from ragexp.llm.endpoint import Endpoint
from ragexp.llm.logprobs import Logprobs, asked
from ragexp.llm.prompts import Template
from ragexp.types import Answer, Hit, Judgement, Question
from ragexp.base.settings import PositiveInt, Temperature


class LLMJudgeBase(AsksForJSON, Judge):
    """An LLM judge named `<kind>-<model>` unless `name` is set. `repeats` > 1 judges each
    question that many times (each repeat is its own cached request): the judgement holds the
    mean scores and every repeat, and the run logs each aggregate's standard deviation.
    `logprobs` (auto: on for a `local` endpoint) asks for the replies' token log-probabilities:
    where the endpoint gives them, a score on a scale is the probability-weighted mean of the scale
    and a yes/no verdict its probability (`ragexp.llm.logprobs`), the sampled values kept beside
    them in `details["sampled"]`."""

    kind = "llm"
    counters = (*AsksForJSON.counters, "failed_criteria")  # metrics that failed for a question, the others kept

    def __init__(self, endpoint: Endpoint, reask_prompt: str, temperature: Temperature, max_tokens: PositiveInt,
                 json_mode: JsonMode, repeats: PositiveInt, name: str | None, logprobs: Logprobs):
        self.json_mode, self.logprobs = parse_json_mode(json_mode), logprobs
        self.endpoint, self.temperature, self.max_tokens, self.repeats = endpoint, float(temperature), max_tokens, repeats
        self.reask_prompt = Template(reask_prompt, ("problem",), "judge.reask_prompt")
        self.name = name or f"{self.kind}-{endpoint.model}"

    def request(self, system: str, user: str, repeat: int, data: tuple[str, ...] = (), schema: dict | None = None
                ) -> ChatRequest:
        """`data`: the content filled into the prompts (a reply's JSON object found there is a quote);
        `schema`: the reply's JSON schema. Token log-probabilities are asked for as `logprobs` says."""
        return ChatRequest((("system", system), ("user", user)), self.temperature, self.max_tokens, self.json_mode, repeat,
                           json.dumps(schema) if schema else "", data=data,
                           top_logprobs=asked(self.logprobs, self.endpoint))

    def judge(self, question: Question, hits: Sequence[Hit], answer: Answer) -> Judgement:
        runs = [self.judge_once(question, hits, answer, repeat) for repeat in range(self.repeats)]
        return runs[0] if len(runs) == 1 else combine(runs)

    def judge_once(self, question: Question, hits: Sequence[Hit], answer: Answer, repeat: int) -> Judgement:
        raise NotImplementedError

    def planned_requests(self, question: Question, hits: Sequence[Hit], answer: Answer) -> list[ChatRequest]:
        return [r for repeat in range(self.repeats) for r in self.plan_once(question, hits, answer, repeat)]

    def plan_once(self, question: Question, hits: Sequence[Hit], answer: Answer, repeat: int) -> list[ChatRequest]:
        raise NotImplementedError



def combine(runs: Sequence[Judgement]) -> Judgement:
    """One judgement from several repeats: mean scores and hallucination, every repeat kept."""
    first = runs[0]
    scores = {m: statistics.fmean(r.scores[m] for r in runs) for m in first.scores}
    hallucination = None if first.hallucination is None else statistics.fmean(float(r.hallucination or 0) for r in runs)
    reasoning = " | ".join(f"repeat {n}: {r.reasoning}" for n, r in enumerate(runs, start=1))
    details = {**first.details, "repeat_scores": [r.scores for r in runs],
               "repeat_hallucination": [r.hallucination for r in runs]}
    return Judgement(first.judge, scores, hallucination, reasoning, details, tuple(runs))
