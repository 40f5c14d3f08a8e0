"""What users read comes out whole and stands on its own: the README, docs/, conf/'s comments, every
command's --help and the generated reference pages cite no document users do not have (the
specification ragexp was built from), name only files the repository has and only modules and
names ragexp has (so do ragexp's own docstrings and comments), and the one-line summaries the help
and the reference show are whole sentences."""
import ast
import functools
import re
import sys
from pathlib import Path

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


DOTTED = re.compile(r"(?<![\w./-])ragexp(?:\.[A-Za-z_]\w*)+")
PLACEHOLDER = re.compile(r"\.(?:mine|my_\w*|[A-Z]+)(?:\.|$)")  # a recipe's module of yours, ragexp.score.NAME


@functools.cache
def ragexp_strings() -> tuple[set[str], set[str]]:
    """The strings ragexp's code writes that start with "ragexp." (MLflow tags, span attributes, file
    names: `ragexp.role`, `ragexp.log`): names, not code. Whole strings, and the heads of f-strings
    (f"ragexp.score.{name}")."""
    whole, heads = set(), set()
    for path in (ROOT / "ragexp").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and DOTTED.fullmatch(node.value):
                whole.add(node.value)
            elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant) \
                    and re.fullmatch(r"ragexp(?:\.\w+)+\.", str(node.values[0].value)):
                heads.add(str(node.values[0].value))
    return whole, heads


@functools.cache
def defined(path: Path) -> dict[str, set[str] | None]:
    """A module's top-level names -> a class's own names (None: not a class)."""
    names: dict[str, set[str] | None] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = {t.id for n in node.body for t in
                                ([n.target] if isinstance(n, ast.AnnAssign) else n.targets if isinstance(n, ast.Assign) else [])
                                if isinstance(t, ast.Name)} | {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = None
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in [node.target] if isinstance(node, ast.AnnAssign) else node.targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        names[name.id] = None
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update({(a.asname or a.name).split(".")[0]: None for a in node.names})
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            names.update(dict.fromkeys(ast.literal_eval(node.value)))  # given by the module's __getattr__ too
    return names


def resolves(dotted: str) -> bool:
    """Whether `ragexp.a.b[.c]` names a module of ragexp, or a name a module defines (a class's own
    name too), read from the source: nothing is imported. A moved module's old name (base/moved.py)
    resolves where the module is now."""
    from ragexp.base.moved import MOVED

    old = next((o for o in MOVED if dotted == o or dotted.startswith(o + ".")), None)
    parts = (MOVED[old] + dotted[len(old):] if old else dotted).split(".")
    for end in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:end])
        module = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if not module.is_file():
            continue
        rest, names = parts[end:], defined(module)
        if not rest:
            return True
        if rest[0] not in names:
            return (base / rest[0]).is_dir() or (base / f"{rest[0]}.py").is_file()
        members = names[rest[0]]
        return len(rest) == 1 or members is None or rest[1] in members
    return False


def test_every_module_or_name_a_text_or_docstring_names_is_ragexps():
    """`ragexp.run.judging.embed_ahead` stayed in a docstring after the module went: every dotted
    `ragexp.…` name in the texts users read and in ragexp's own docstrings and comments resolves,
    but the names ragexp writes (tags, attributes, files) and a recipe's placeholders."""
    whole, heads = ragexp_strings()
    texts = {**TEXTS, **{str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in (ROOT / "ragexp").rglob("*.py")}}
    stale = sorted({f"{where}: {name}" for where, text in texts.items() for name in DOTTED.findall(text)
                    if not (name in whole or any(w.startswith(name) for w in whole) or f"{name}.".startswith(tuple(heads))
                            or PLACEHOLDER.search(name) or resolves(name))})
    assert not stale, stale
    assert resolves("ragexp.judges.contract.Judge.run_files") and not resolves("ragexp.run.judging.embed_ahead")


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
