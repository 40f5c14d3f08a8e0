"""Prompt templates from config: text with named fields in braces (`{question}`), `{{` and `}}`
for literal braces. Field names are checked when the component is built: a template may use only
the fields its component fills in; no attribute access, no expressions, no eval.

Content is data, never instructions: the default prompts put every field between tags
(`<question>...</question>`, `<document n="1" id="...">...</document>`, ...) and say that what
is inside them is data. Content cannot forge a tag: `neutralise` turns the `<` of any of
`DATA_TAGS` inside a value into `‹` (U+2039), so `</context>` in a document stays text."""
from __future__ import annotations

import re
import string
from typing import Sequence

from ragexp.errors import RagexpError
from ragexp.types import Hit


class Template:
    def __init__(self, text: str, fields: Sequence[str], setting: str):
        self.text, self.fields, self.setting = str(text), tuple(fields), setting
        try:
            parsed = list(string.Formatter().parse(self.text))
        except ValueError as err:
            raise RagexpError(f"{setting}: {err}; write literal braces as {{{{ and }}}}") from None
        for _, name, spec, conversion in parsed:
            if name is None:
                continue
            if name not in self.fields or spec or conversion:
                raise RagexpError(f"{setting}: unknown field {{{name}{'!' + conversion if conversion else ''}"
                                  f"{':' + spec if spec else ''}}}; the fields are "
                                  + ", ".join(f"{{{f}}}" for f in self.fields)
                                  + " (write literal braces as {{ and }})")

    def render(self, **values: str) -> str:
        """The template filled in; every value is `neutralise`d unless it is already `Delimited`."""
        return self.text.format(**{name: value if isinstance(value := values.get(name, ""), Delimited)
                                   else neutralise(value) for name in self.fields})


def template_problems(fields: Sequence[str], **templates: str) -> list[str]:
    """What is wrong with each template (keyword = its setting), for a component's `constraints`."""
    problems = []
    for setting, text in templates.items():
        try:
            Template(text, fields, setting)
        except RagexpError as err:
            problems.append(str(err))
    return problems


DATA_TAGS = ("question", "context", "documents", "document", "expected_answer", "generated_answer", "answer",
             "sentences", "claims")
FORGED_TAG = re.compile(r"<(?=\s*/?\s*(?:" + "|".join(DATA_TAGS) + r")\b)", re.IGNORECASE)


class Delimited(str):
    """Text built here whose content is already neutralised (it holds tags of its own)."""


def neutralise(text: str) -> str:
    """`text` with every opening or closing tag of `DATA_TAGS` made harmless (`<` -> `‹`)."""
    return FORGED_TAG.sub("\u2039", str(text))


def numbered_context(hits: Sequence[Hit]) -> Delimited:
    """The retrieved chunks as the generator and the judges see them: each between
    `<document n="N" id="doc id">` and `</document>` (cited as [Doc N])."""
    return Delimited("\n".join(f'<document n="{n}" id="{re.sub(r"[^A-Za-z0-9_.:/#-]", "_", str(hit.chunk.doc_id))}">\n'
                                f"{neutralise(hit.chunk.text.strip())}\n</document>"
                                for n, hit in enumerate(hits, start=1)))


def numbered_lines(lines: Sequence[str]) -> Delimited:
    """`[1] first`, `[2] second`, ...: sentences or claims the judge refers to by number, one a line."""
    return Delimited("\n".join(f"[{n}] {neutralise(' '.join(line.split()))}" for n, line in enumerate(lines, start=1)))
