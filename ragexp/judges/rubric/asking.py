"""Asking an LLM for a rubric's criteria and reading its verdicts: the prompt (each criterion with
its instructions, scale and examples; the data between tags) and the reply, one entry per
criterion: `{"<name>": {"reasoning": "...", "score": ...}}` (a bare value is read as the score)."""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Sequence

from ragexp.judges.llm import expected_text
from ragexp.judges.rubric.criteria import Criterion, field_value
from ragexp.llm.logprobs import distribution, expected, scale_texts, value_offsets
from ragexp.llm.prompts import Delimited, neutralise, numbered_context
from ragexp.llm.replies import Disagreeing, Unreadable, own_objects, text_bound
from ragexp.types import Answer, Hit, Question

DATA = {"question": "the question", "contexts": "the retrieved context", "answer": "the generated answer",
        "reference": "the expected (reference) answer"}


REASONING_CHARS = 400  # "one or two sentences", bounded in the reply's schema


@dataclass(frozen=True)
class Verdict:
    score: float
    reason: str
    clamped: str = ""  # "12 -> 10" when the judge gave a value off the scale
    sampled: float | None = None  # the value the judge wrote, when `score` is the probability-weighted mean


def criteria_text(criteria: Sequence[Criterion]) -> Delimited:
    """The criteria as the judge reads them: name, scale, what it looks at, instructions, examples."""
    blocks = []
    for c in criteria:
        looks = ", ".join(DATA.get(f, f"the column <column name=\"{f}\">") for f in c.reads)
        lines = [f"- {c.name}: {neutralise(c.instructions)}", f"  Score: {c.scale.describe()}. Looks at: {looks}."]
        for n, example in enumerate(c.examples, start=1):
            shown = "; ".join(f"{k}: {neutralise(' '.join(str(v).split()))}" for k, v in example.items()
                              if k not in ("verdict", "reasoning"))
            why = f" ({neutralise(str(example['reasoning']))})" if example.get("reasoning") else ""
            lines.append(f"  Example {n}: {shown} -> {json.dumps(example['verdict'])}{why}")
        blocks.append("\n".join(lines))
    return Delimited("\n".join(blocks))


def reply_shape(criteria: Sequence[Criterion]) -> Delimited:
    return Delimited("{" + ", ".join(f'"{c.name}": {{"reasoning": "<one or two sentences>", "score": <{c.scale.describe()}>}}'
                                     for c in criteria) + "}")


def reply_schema(criteria: Sequence[Criterion], max_tokens: int) -> dict:
    """The JSON schema of the reply `reply_shape` describes, for endpoints that take one
    (`response_format` json_schema): an entry per criterion, its reasoning at most REASONING_CHARS
    characters and short enough that the reply ends within `max_tokens` (a model that runs on ends it),
    its score one of its levels or an integer on its scale."""
    def score(c: Criterion) -> dict:
        if c.scale.levels:
            return {"type": "string", "enum": [name for name, _ in c.scale.levels]}
        return {"type": "integer", "minimum": c.scale.low, "maximum": c.scale.high}

    reasoning = text_bound(max_tokens, len(criteria), 30 * len(criteria), REASONING_CHARS)
    entry = {c.name: {"type": "object", "properties": {"reasoning": {"type": "string", "maxLength": reasoning},
                                                       "score": score(c)},
                      "required": ["reasoning", "score"]} for c in criteria}
    return {"type": "object", "properties": entry, "required": [c.name for c in criteria]}


def data_text(criteria: Sequence[Criterion], question: Question, hits: Sequence[Hit], answer: Answer) -> str:
    """The fields the criteria read, each between its tags, in a fixed order; a column of the row
    as <column name="...">. Raises Unreadable when the row lacks a column."""
    fields = dict.fromkeys(f for c in criteria for f in c.reads)
    parts = []
    if "question" in fields:
        parts.append(f"<question>\n{neutralise(question.text)}\n</question>")
    if "contexts" in fields:
        parts.append(f"<context>\n{numbered_context(hits) or '(nothing was retrieved)'}\n</context>")
    if "reference" in fields:
        parts.append(f"<expected_answer>\n{neutralise(expected_text(question))}\n</expected_answer>")
    if "answer" in fields:
        parts.append(f"<generated_answer>\n{neutralise(answer.text.strip() or '(empty answer)')}\n</generated_answer>")
    for name in fields:
        if name not in DATA:
            parts.append(f'<column name="{name}">\n{neutralise(field_value(name, question, hits, answer))}\n</column>')
    return "\n\n".join(parts)


def read_verdicts(text: str, criteria: Sequence[Criterion], data: Sequence[str] = (),
                  one_object: bool = False) -> dict[str, Verdict | Unreadable]:
    """Each criterion's verdict in the reply, or why it cannot be read. The verdict is chosen as
    every judge's (`ragexp.llm.replies`): an object that quotes `data` is never read; of the
    others, those that give some criterion a verdict must agree (else every criterion is
    unreadable: the judge is asked again); `one_object`: asked with a JSON schema."""
    try:
        own = own_objects(text, data, one_object)
    except Unreadable as err:
        return {c.name: err for c in criteria}
    readings = [entries(obj, criteria) for obj in own]
    given = [{n: v for n, v in found.items() if isinstance(v, Verdict)} for found in readings]
    fitting = [n for n, verdicts in enumerate(given) if verdicts]
    if any(given[n] != given[fitting[0]] for n in fitting[1:]):
        disagreeing = Disagreeing(f"the reply gives {len(fitting)} different verdicts (JSON objects with criteria's "
                                  "scores); reply with exactly one")
        return {c.name: disagreeing for c in criteria}
    return readings[fitting[0] if fitting else -1]


def entries(reply: dict, criteria: Sequence[Criterion]) -> dict[str, Verdict | Unreadable]:
    """Each criterion's verdict in one JSON object of the reply, or why it cannot be read."""
    keys = {str(k).strip().lower(): k for k in reply}
    if len(criteria) == 1 and criteria[0].name.lower() not in keys and ("score" in keys or "verdict" in keys):
        reply, keys = {criteria[0].name: reply}, {criteria[0].name.lower(): criteria[0].name}  # the entry alone
    verdicts: dict[str, Verdict | Unreadable] = {}
    for c in criteria:
        if c.name.lower() not in keys:
            verdicts[c.name] = Unreadable(f"no entry for criterion {c.name!r}")
            continue
        verdicts[c.name] = verdict(reply[keys[c.name.lower()]], c)
    return verdicts


def verdict(entry, criterion: Criterion) -> Verdict | Unreadable:
    reason = ""
    if isinstance(entry, dict):
        fields = {str(k).strip().lower(): v for k, v in entry.items()}
        given = next((fields[k] for k in ("score", "verdict", "level", "value") if k in fields), None)
        if given is None:
            return Unreadable(f"{criterion.name}: no score")
        why = fields.get("reasoning", fields.get("reason", ""))
        reason = why.strip() if isinstance(why, str) else ""
    else:
        given = entry
    try:
        score, moved = criterion.scale.read(given)
    except Unreadable as err:
        return Unreadable(f"{criterion.name}: {err}")
    return Verdict(score, reason, f"{given} -> {score:g}" if moved else "")


def weighted(verdicts: dict[str, Verdict | Unreadable], criteria: Sequence[Criterion], reply) -> dict[str, Verdict | Unreadable]:
    """The verdicts with each criterion's score the probability-weighted mean of its scale (its
    levels' values, or its whole numbers) where the reply's token log-probabilities tell
    (`ragexp.llm.logprobs`), the written score kept as `sampled`."""
    if not reply.logprobs:
        return verdicts
    found = value_offsets(reply.text)
    out = dict(verdicts)
    for c in criteria:
        v = verdicts.get(c.name)
        entries = [n for n, (key, _) in enumerate(found) if key.strip().lower() == c.name.lower()]
        if not isinstance(v, Verdict) or len(entries) != 1:
            continue
        score_at = next((offset for key, offset in found[entries[0] + 1:] if key.strip().lower() == "score"), None)
        if score_at is None:
            continue
        texts = {json.dumps(name): value for name, value in c.scale.levels} if c.scale.levels else \
            scale_texts(c.scale.low, c.scale.high)
        probabilities = distribution(reply.logprobs, reply.text, score_at, texts)
        if probabilities is not None:
            out[c.name] = replace(v, score=round(expected(probabilities), 4), sampled=v.score)
    return out
