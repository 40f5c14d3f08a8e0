"""The documentation's examples run as printed: every ```bash``` and ```python``` block of README.md
and docs/, unless the line before it says why it cannot (`<!-- not runnable: REASON -->`, which
the rendered page does not show: a server that runs until stopped, your own files or keys, a
clone's make targets). The fast tier composes the config of every ragexp command line in the
blocks that run and in the README (a renamed option or group fails here, in milliseconds) and
checks that every block that does not run says why; the process tier runs the blocks for real,
page by page in a fresh folder, in order (a page's later blocks see what its earlier ones made).
The session's summary gives the counts."""
import importlib
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CONF, ROOT, cli_env

DOCS = ROOT / "docs"
BLOCK = re.compile(r"^(?:<!-- not runnable: (?P<why>[^\n]*?) -->\n)?```(?P<lang>bash|python)[^\n]*\n(?P<code>.*?)^```",
                   re.M | re.S)
HYDRA_COMMANDS = {"ragexp": "config", "ragexp.synth": "synth", "ragexp.monitor": "monitor"}


def doc_blocks() -> dict[str, list[tuple[str, str, str | None]]]:
    """page (README.md, or relative to docs/) -> its bash and python blocks in order: (language,
    code, why it does not run, or None)."""
    pages = {}
    for page in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        blocks = [(m["lang"], m["code"], m["why"]) for m in BLOCK.finditer(page.read_text(encoding="utf-8"))]
        if blocks:
            pages["README.md" if page.parent == ROOT else str(page.relative_to(DOCS))] = blocks
    return pages


def runnable_blocks() -> dict[str, list[tuple[str, str]]]:
    """page -> the blocks that run, in order."""
    pages = {page: [(lang, code) for lang, code, why in blocks if why is None] for page, blocks in doc_blocks().items()}
    return {page: blocks for page, blocks in pages.items() if blocks}


def command_lines(code: str) -> list[list[str]]:
    """The `python -m ragexp...` commands of a shell block, as argument lists (comments, pipes and
    `|| ...` dropped, continuation lines joined)."""
    commands = []
    for line in code.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        cut = next((i for i, w in enumerate(words) if w in ("|", "||", "&&", ";")), len(words))
        words = words[:cut]
        if words[:2] == ["python", "-m"] and words[2].startswith("ragexp"):
            commands.append(words[2:])
    return commands


def first_values(overrides: list[str]) -> list[str]:
    """A sweep's `key=a,b` as its first point, `key=a`; the flags (-m, --help, --cfg job) dropped."""
    points = []
    for arg in overrides:
        if arg.startswith("-") or "=" not in arg or arg.startswith("hydra."):
            continue
        key, _, value = arg.partition("=")
        if "," in value and not value.startswith(("[", "{", "'", '"')):
            value = value.split(",")[0]
        points.append(f"{key}={value}")
    return points


BLOCKS = doc_blocks()
PAGES = runnable_blocks()
# a command with --config-dir reads config files an earlier block of its page writes: the process tier runs it
COMMANDS = [(page, command) for page, blocks in BLOCKS.items() for lang, code, why in blocks
            if lang == "bash" and (why is None or page == "README.md") for command in command_lines(code)
            if "--config-dir" not in command]


def test_the_docs_have_runnable_blocks_and_the_tour_is_among_them():
    assert "get-started/tour.md" in PAGES
    assert len(COMMANDS) >= 8 and any(page == "README.md" for page, _ in COMMANDS)


def test_every_block_that_does_not_run_says_why():
    """A block is run unless marked; a mark gives its reason in words, and no block keeps the old,
    visible `title="runnable"`."""
    for page, blocks in BLOCKS.items():
        for number, (_, _, why) in enumerate(blocks, 1):
            assert why is None or len(why.split()) >= 3, f"{page}, block {number}: say why it does not run"
    pages = [ROOT / "README.md", *DOCS.rglob("*.md")]
    assert not [p for p in pages if 'title="runnable"' in p.read_text(encoding="utf-8")]


@pytest.mark.parametrize("page,command", COMMANDS, ids=[f"{p}:{' '.join(c)[:60]}" for p, c in COMMANDS])
def test_every_documented_command_line_is_accepted(page, command):
    """Hydra commands: their config composes with the overrides (a renamed key, group or option
    fails); argparse tools: their parser accepts the arguments."""
    module, args = command[0], command[1:]
    if module in HYDRA_COMMANDS:
        from hydra import compose, initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra

        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            overrides = first_values(args)
            if module == "ragexp":  # as python -m ragexp spells them for Hydra (system.params.NAME=...)
                from ragexp.config.overrides import with_user_params

                overrides = with_user_params(overrides)
            compose(config_name=HYDRA_COMMANDS[module], overrides=overrides)
        return
    tool = importlib.import_module(f"{module}.__main__" if (ROOT / module.replace(".", "/")).is_dir() else module)
    if hasattr(tool, "parser"):
        tool.parser().parse_args(args)
    else:
        assert callable(tool.main), f"{page}: python -m {module}: no such command"


@pytest.mark.process
@pytest.mark.parametrize("page", list(PAGES))
def test_the_runnable_blocks_of_a_page_run(page, tmp_path):
    env = cli_env({"PATH": f"{Path(sys.executable).parent}:{cli_env()['PATH']}", "NO_COLOR": "1"})
    for number, (lang, code) in enumerate(PAGES[page], 1):
        argv = ["bash", "-e", "-c", code] if lang == "bash" else [sys.executable, "-c", code]
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"{page}, runnable block {number}:\n{code}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


GLOSSARY = DOCS / "concepts" / "glossary.md"


def glossary_rows() -> dict[str, list[str]]:
    """metric name -> the cells of its glossary row (a row may name several: `conciseness`, `coherence`)."""
    rows = {}
    for line in GLOSSARY.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| `"):
            for name in re.findall(r"`([^`]+)`", cells[0]):
                rows[name] = cells
    return rows


# the judges: each conf/judge/ option that names its class (not a preset of another, like judge=local)
JUDGES = {p.stem: re.search(r"^_target_: *(\S+)", p.read_text(encoding="utf-8"), re.M)
          for p in sorted((ROOT / "conf" / "judge").glob("*.yaml"))}


@pytest.mark.parametrize("judge", sorted(name for name, target in JUDGES.items() if target))
def test_the_glossary_gives_each_judge_metric_its_scale_and_judge(judge):
    from hydra.utils import get_class

    cls = get_class(JUDGES[judge][1])
    rows = glossary_rows()
    for metric in cls.metrics:
        assert metric in rows, f"{metric} ({judge}) is not in the glossary"
        _, scale, _, _, judges = rows[metric]
        low, high = cls.scales[metric]
        assert f"{low:g}-{high:g}" in scale and judge in judges.split(", "), f"{metric}: {judge} gives it on {low:g}-{high:g}"


def test_every_aggregate_of_a_run_is_in_the_glossary(tmp_path):
    import json

    from conftest import HASH, run_app

    proc = run_app("dataset.limit=3", "tracker=none", "retriever=bm25", *HASH, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [values] = json.loads(next(tmp_path.glob("outputs/*/*/results.json")).read_text()).values()
    rows = glossary_rows()
    names = {re.sub(r"_at_\d+$", "@k", key.removeprefix("avg_")) for key in values if key != "judge"}
    assert names - set(rows) == set()


def test_the_readme_says_what_the_link_a_run_prints_opens():
    """A run's printed link opens its evaluation view (its Traces tab: a row per question), not the
    runs table; the README says so where it tells to open it."""
    from ragexp.store.ui_links import runs_view_link

    line = next(text for text in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
                if "open the link the run printed" in text)
    assert "evaluation view" in line and "runs table" not in line
    assert runs_view_link("sqlite:///mlflow.db", "1", "abc").endswith("#/experiments/1/runs/abc/traces")


TIER_ROW = re.compile(r"^\| `make ([\w-]+)` \| (?:`-m \"(?P<expression>[^\"]*)\"[^`]*`|everything)[^|]* \| about (?P<count>[\d,]+) \|",
                      re.M)
COLLECT = """
import json, sys
import pytest
from conftest import markers_of

class Markers:
    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items):
        print("MARKERS " + json.dumps(markers_of(items)), flush=True)

sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "tests"], plugins=[Markers()]))
"""


def collected_markers() -> list[list[str]]:
    """Each test's markers, of the whole suite's collection: this session's when it collected the whole
    suite (make test does), else `pytest --collect-only` in a process of its own (about a minute)."""
    from conftest import COLLECTED, cli_env

    if COLLECTED.get("whole"):
        return COLLECTED["markers"]
    proc = subprocess.run([sys.executable, "-c", COLLECT], cwd=ROOT, env=cli_env({"PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"}),
                          capture_output=True, text=True, timeout=900)
    [line] = [line for line in proc.stdout.splitlines() if line.startswith("MARKERS ")]
    import json

    return json.loads(line.removeprefix("MARKERS "))


def in_tier(expression: str, markers: list[str]) -> bool:
    """Whether a test with `markers` is chosen by `-m expression` (marker names joined by and, or, not)."""
    names = set(re.findall(r"\w+", expression)) - {"and", "or", "not"}
    return bool(eval(expression or "True", {"__builtins__": {}}, {name: name in markers for name in names}))


def test_the_contributing_pages_test_counts_are_within_a_tenth_of_what_pytest_collects():
    """The tiers' table says how many tests each runs (it once said 807 when 1,500 were collected):
    each count is within 10% of the tests the tier's -m chooses from the suite's collection."""
    rows = TIER_ROW.findall((DOCS / "contributing" / "index.md").read_text(encoding="utf-8"))
    assert [target for target, _, _ in rows] == ["test", "test-process", "test-model", "test-engines", "test-full"]
    markers = collected_markers()
    counted = {target: sum(in_tier(expression, m) for m in markers) for target, expression, _ in rows}
    said = {target: int(count.replace(",", "")) for target, _, count in rows}
    assert {t: said[t] for t in said if abs(said[t] - counted[t]) > 0.1 * counted[t]} == {}, f"pytest collects {counted}"
