"""What users read comes out whole and stands on its own: the README, docs/, conf/'s comments, every
command's --help and the generated reference pages cite no document users do not have (the
specification ragexp was built from), name only files the repository has, and the one-line
summaries the help and the reference show are whole sentences."""
import re
import sys

import pytest

from conftest import ROOT
from ragexp.config import docs as config_docs

sys.path.insert(0, str(ROOT / "docs" / "hooks"))
try:
    import reference  # the mkdocs hook that writes the reference pages
except ModuleNotFoundError:  # mkdocs comes with the docs extra, which .venv-engines (marker engines) lacks
    reference = None

CITATION = re.compile(r"(?i)\bspecification\b|\bspec \d|\bsection \d+\.\d+")
FILE_NAMED = re.compile(r"(?<![\w/.-])((?:docs|examples|conf|bench|tests)/[\w./-]*\w\.(?:md|py|yaml|jsonl|json|csv))")


def hook():
    """The docs' reference hook (it needs mkdocs, which `make install` installs with the docs extra)."""
    assert reference is not None, "mkdocs is not installed: `make install` installs it (the docs extra)"
    return reference


def product_texts() -> dict[str, str]:
    """Where each text comes from -> the text."""
    texts = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8")
             for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "conf").rglob("*.yaml"))]}
    if reference is not None:
        texts.update({f"generated {uri}": text for uri, text in reference.pages().items()})
    for config in config_docs.COMMANDS:
        chosen = [f"{g.name}={o.name}" for g in config_docs.groups_of(config) for o in g.options]
        texts[f"--help of {config_docs.COMMANDS[config]}"] = config_docs.command_help(config, chosen)
    return texts


TEXTS = product_texts()


@pytest.mark.parametrize("where", sorted(TEXTS))
def test_no_text_cites_the_specification(where):
    cited = [line.strip() for line in TEXTS[where].splitlines() if CITATION.search(line)]
    assert not cited, f"{where} cites a document users do not have: {cited[:3]}"


@pytest.mark.parametrize("where", sorted(TEXTS))
def test_every_file_a_text_names_is_in_the_repository(where):
    missing = sorted(name for name in set(FILE_NAMED.findall(TEXTS[where]))
                     if not (ROOT / name).exists() and not re.search(r"my_|/mine\.|YOUR|PATH|\*", name))  # placeholders of yours
    assert not missing, f"{where} names files the repository lacks: {missing}"


def test_the_summaries_help_and_reference_show_are_whole_sentences():
    """An option's summary (its header's first sentence, shown by --help and the reference) and each
    module's first sentence (the layout page) end as sentences do: none is cut at "e.g." or runs
    an example command into its text."""
    cut = [f"conf/{folder}/{o.name}.yaml: {o.summary!r}" for folder in config_docs.group_folders()
           for o in config_docs.options_of(folder) if o.about and not o.summary.endswith((".", "!", "?", ")"))]
    rows = [line for line in hook().layout_page().splitlines() if line.startswith("| `ragexp")]
    cut += [row for row in rows if not row.rstrip(" |").endswith((".", "!", "?", ")", "`"))]
    assert rows and not cut, cut
    assert config_docs.first_sentence("Use one of the two below, e.g. `token`. Then more.") == \
        "Use one of the two below, e.g. `token`."
    assert config_docs.first_sentence("Metrics that need no LLM.\n\n- Correctness: exact match.") == "Metrics that need no LLM."


def test_an_options_example_commands_are_shown_as_commands():
    option = next(o for o in config_docs.options_of("system") if o.name == "python")
    assert option.examples and all(e.startswith("python -m ragexp") for e in option.examples)
    assert "python -m" not in option.about
    shown = config_docs.command_help("config", ["system=python"])
    assert any(line == f"    {option.examples[0]}" for line in shown.splitlines())


def test_the_python_api_page_documents_the_names_ragexp_has():
    """It documented `ragexp.run_evaluation(...)`, an internal alias (AttributeError), and never
    `ragexp.evaluate`; now each name it documents is one `import ragexp` has, and the base classes
    of a new component are there."""
    import ragexp

    page = hook().python_api_page()
    documented = re.findall(r"^### `ragexp\.(\w+)\(", page, re.M)
    assert sorted(documented) == ["Evaluation", "SystemOutput", "evaluate"]
    assert all(hasattr(ragexp, name) for name in documented)
    for base in ("System", "Chunker", "Retriever", "Judge"):
        assert re.search(rf"^### `ragexp\.[\w.]+\.{base}`", page, re.M), base


def test_the_layout_page_lists_every_module():
    listed = {line.split("`")[1] for line in hook().layout_page().splitlines() if line.startswith("| `ragexp")}
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
               for p in (ROOT / "ragexp").rglob("*.py") if "conf" not in p.relative_to(ROOT).parts}
    assert listed == modules and "ragexp.judges.rubric.beside" in listed
