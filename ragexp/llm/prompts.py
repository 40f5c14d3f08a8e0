"""Prompt templates from config: text with named fields in braces (`{question}`), `{{` and `}}`
for literal braces. Field names are checked when the component is built: a template may use only
the fields its component fills in; no attribute access, no expressions, no eval."""
from __future__ import annotations

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
        return self.text.format(**{name: values.get(name, "") for name in self.fields})


def template_problems(fields: Sequence[str], **templates: str) -> list[str]:
    """What is wrong with each template (keyword = its setting), for a component's `constraints`."""
    problems = []
    for setting, text in templates.items():
        try:
            Template(text, fields, setting)
        except RagexpError as err:
            problems.append(str(err))
    return problems


def numbered_context(hits: Sequence[Hit]) -> str:
    """The retrieved chunks as the generator and the judges see them: `[Doc N] (doc id)` and text."""
    return "\n\n".join(f"[Doc {n}] ({hit.chunk.doc_id})\n{hit.chunk.text.strip()}" for n, hit in enumerate(hits, start=1))


def numbered_lines(lines: Sequence[str]) -> str:
    """`[1] first`, `[2] second`, ...: sentences or claims the judge refers to by number."""
    return "\n".join(f"[{n}] {' '.join(line.split())}" for n, line in enumerate(lines, start=1))
