"""A JSON reply's value as a probability over what it could have been, from the reply's token
log-probabilities (`Reply.logprobs`): at the token where the value starts, each likely alternative
token that spells the start of one possible value (a scale's `7`, `true`, a level's `"pass"`) gives
that value its probability. A token that starts several values (`1` of 1 and 10) is followed into
the next token's alternatives when it is the token the model wrote, and left out otherwise (its
share is unknown); alternatives that spell no possible value (a quote where a number goes) are left
out too, and the rest is normalised. `expected` is the probability-weighted mean of a scale, the
score a judge gives where the endpoint returns log-probabilities: it tells apart replies that wrote
the same number with different confidence, so a small model's ranking is usable.

None wherever that cannot be read: no log-probabilities, tokens that do not spell the reply (nor
hold it once: a server may strip a code fence the model wrote around it), a value whose start no
alternative spells."""
from __future__ import annotations

import math
from typing import Hashable, Literal, Mapping, Sequence, TypeVar

V = TypeVar("V", bound=Hashable)
Logprobs = Literal["auto", True, False]

TOP_LOGPROBS = 20  # alternatives asked for at each token: the most the OpenAI protocol allows, more than a 1-10 scale


def asked(setting: Logprobs, endpoint) -> int:
    """`ChatRequest.top_logprobs` for a judge's `logprobs` setting: true, false, or auto (on for an
    endpoint on this machine, `Endpoint.logprobs_by_default`)."""
    wanted = setting is True or (setting == "auto" and bool(getattr(endpoint, "logprobs_by_default", False)))
    return TOP_LOGPROBS if wanted else 0


FOLLOWED = 4  # tokens after a value's first whose alternatives are kept: `1`, `0` of 10; `"`, `pass`, `"` of a level


def at_values(tokens: list, text: str) -> list:
    """`tokens` (as `ragexp.llm.client.reply_logprobs` reads them: text, bytes, log-probability,
    alternatives) with the alternatives kept only where a JSON value of `text` starts and the few
    tokens after it: what `distribution` reads, a small part of what is cached."""
    if not tokens:
        return tokens
    base = spelled_at(tokens, text, 0)
    if base is None:  # nothing `distribution` could read
        return [[*token[:3], []] for token in tokens]
    starts = sorted(base + len(text[:offset].encode()) for _, offset in value_offsets(text))
    kept, start, next_start, left = [], 0, 0, 0
    for token in tokens:
        end = start + token[1]
        while next_start < len(starts) and starts[next_start] < start:
            next_start += 1
        if next_start < len(starts) and starts[next_start] < end:
            left = FOLLOWED + 1
        kept.append(token if left > 0 else [*token[:3], []])
        left -= 1
        start = end
    return kept


def value_offsets(text: str) -> list[tuple[str, int]]:
    """Each `"key": value` of the JSON in `text` as (key, where its value starts), in order, nested
    objects' keys included (a key is a string outside any string followed by a colon)."""
    found: list[tuple[str, int]] = []
    n, size = 0, len(text)
    while n < size:
        if text[n] != '"':
            n += 1
            continue
        end, escaped = n + 1, False
        while end < size and (escaped or text[end] != '"'):
            escaped = text[end] == "\\" and not escaped
            end += 1
        after = end + 1
        while after < size and text[after] in " \t\r\n":
            after += 1
        if after < size and text[after] == ":":
            start = after + 1
            while start < size and text[start] in " \t\r\n":
                start += 1
            found.append((text[n + 1:end], start))
        n = end + 1
    return found


def offsets_of(text: str, key: str) -> list[int]:
    """Where each value of `key` starts in `text`, in order."""
    return [start for name, start in value_offsets(text) if name == key]


def distribution(tokens: Sequence[tuple], text: str, offset: int, values: Mapping[str, V]) -> dict[V, float] | None:
    """The probability of each of `values` (JSON text -> value) for the value that starts at
    `offset` of the reply `text`, from its `tokens` (`Reply.logprobs`); None when unreadable."""
    if not tokens:
        return None
    at = spelled_at(tokens, text, offset)
    if at is None:
        return None
    encoded = "".join(t[0] for t in tokens).encode()
    start = 0
    for index, token in enumerate(tokens):
        if start + token[1] > at:
            lead = encoded[start:at].decode(errors="replace")
            masses = spread(tokens, index, lead, dict(values))
            total = sum(masses.values())
            return {v: m / total for v, m in masses.items()} if total > 0 else None
        start += token[1]
    return None


def spelled_at(tokens: Sequence[tuple], text: str, offset: int) -> int | None:
    """The byte of the tokens' text where `offset` of the reply `text` is: the same when they spell
    the reply, else where the reply stands in them once (a server that strips the code fence the model
    wrote around its JSON: llama.cpp's); None when they do not hold it, or hold it twice."""
    written = "".join(t[0] for t in tokens)
    if sum(t[1] for t in tokens) != len(written.encode()):
        return None  # a token's text is not its bytes (a character split between tokens)
    start = written.find(text)
    if start < 0 or written.find(text, start + 1) >= 0:
        return None
    return len(written[:start + offset].encode())


def spread(tokens: Sequence[tuple], index: int, lead: str, left: dict[str, V], weight: float = 1.0) -> dict[V, float]:
    """The probability mass the alternatives at token `index` give each value, once `lead` (what the
    token holds before the value) is written; `left`: the values' texts still to spell."""
    text, _, logprob, alternatives = tokens[index]
    choices = dict(alternatives)
    if text not in choices and logprob is not None:
        choices[text] = logprob
    masses: dict[V, float] = {}
    for alternative, alt_logprob in choices.items():
        if not alternative.startswith(lead) or alternative == lead:
            continue  # it spells something else before the value, or not yet the value
        rest = alternative[len(lead):]
        fitting = {t: v for t, v in left.items() if t.startswith(rest) or ended(rest, t)}
        p = weight * math.exp(alt_logprob)
        if len(fitting) == 1:
            [value] = fitting.values()
            masses[value] = masses.get(value, 0.0) + p
        elif fitting and alternative == text and index + 1 < len(tokens):  # the token written: what followed it
            after = {t[len(rest):]: v for t, v in fitting.items() if t.startswith(rest)}
            for value, mass in spread(tokens, index + 1, "", after, p).items():
                masses[value] = masses.get(value, 0.0) + mass
    return masses


def ended(rest: str, value_text: str) -> bool:
    """Whether a token's `rest` spells the whole of `value_text` and then something that cannot go on
    with it (a comma, a brace, a space: not a digit, a letter or a point)."""
    if value_text == rest:
        return False
    if not rest.startswith(value_text):
        return False
    following = rest[len(value_text)]
    return not (following.isalnum() or following in "._")


def expected(probabilities: Mapping[float, float]) -> float:
    """The probability-weighted mean of a scale."""
    return sum(float(v) * p for v, p in probabilities.items())


def scale_texts(low: float, high: float) -> dict[str, float]:
    """The JSON texts of a scale's whole numbers, `low` to `high`."""
    return {str(n): float(n) for n in range(math.ceil(low), math.floor(high) + 1)}


def scale_value(reply, key: str, low: float, high: float) -> float | None:
    """The probability-weighted mean of the whole numbers `low`..`high` for the value of `key` in
    `reply` (a `Reply`), or None: no log-probabilities, or `key` not once in the reply."""
    found = offsets_of(reply.text, key) if reply.logprobs else []
    if len(found) != 1:
        return None
    probabilities = distribution(reply.logprobs, reply.text, found[0], scale_texts(low, high))
    return None if probabilities is None else round(expected(probabilities), 4)


BOOLEAN = {"true": True, "false": False}


def probability_true(tokens: Sequence[tuple], text: str, offset: int) -> float | None:
    """The probability the boolean value at `offset` is true, or None."""
    found = distribution(tokens, text, offset, BOOLEAN)
    return None if found is None else round(found.get(True, 0.0), 4)


def probability_of(reply, key: str) -> float | None:
    """The probability the boolean value of `key` in `reply` is true, or None (as `scale_value`)."""
    found = offsets_of(reply.text, key) if reply.logprobs else []
    return probability_true(reply.logprobs, reply.text, found[0]) if len(found) == 1 else None
