"""The id by which two runs of the same questions pair a question (the regression check of
`gate.baseline` and `assert_no_regression`; a trace's `EVAL_REQUEST_ID`): the id its row gave,
else a digest of its text. Ids made from the rows' order (q1, q2, ...) would pair other questions
once a file is reordered or edited; the text does not move with its row."""
from __future__ import annotations

import hashlib

DIGEST_PREFIX = "text-"  # a pairing id made from the question's text, not given by its row


def pairing_id(qid: str, text: str, id_from_row: bool = False) -> str:
    """`qid` when its row gave it; when ragexp made it from the row's place (`id_from_row`), the
    digest of the question's text, whitespace runs read as one space: `text-` and 16 hex digits."""
    if not id_from_row:
        return str(qid)
    return DIGEST_PREFIX + hashlib.sha256(" ".join(text.split()).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def shared_question(ids: list[str], texts: list[str], made: list[bool]) -> tuple[str, str, str] | None:
    """Two rows without an id that ask the same question pair alike: (first id, second id, text) of
    the first two such rows, else None."""
    seen: dict[str, str] = {}
    for qid, text, from_row in zip(ids, texts, made):
        if not from_row:
            continue
        key = pairing_id(qid, text, True)
        if key in seen:
            return seen[key], str(qid), text
        seen[key] = str(qid)
    return None
