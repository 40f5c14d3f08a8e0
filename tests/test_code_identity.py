"""A component's key follows the user's code however it is imported: editing a module of the user's
that the component's module imports (a submodule of its own package, a constant taken with
`from pkg.sub import NAME`, a relative import, a helper's own helper, an import in a function) is
a miss although the component's file is unchanged; editing nothing is a hit; a package installed
into the Python installation is not followed. Keys are computed once per target per process, also
when threads ask at once, and a lone surrogate in a text has a key."""
import hashlib
import json
import re
import shutil
import sys
import threading
from pathlib import Path

import pytest
from conftest import ROOT, run_cli

from ragexp.store import code_closure
from ragexp.store import code_identity
from ragexp.store.cache import StageCache
from ragexp.store.embedding_store import EmbeddingStore
from ragexp.store.code_identity import code_hash, key_of
from ragexp.config.build import from_yaml

# Each shape: the user's files (PKG stands for the shape's own package name), the component's
# target and the file of the user's to edit (SIZE = 300 becomes SIZE = 120 there).
SHAPES = {
    "a submodule of its own package, imported absolutely by the package's __init__": (
        {"PKG/__init__.py": "from ragexp.components.chunkers import Chunker\nfrom PKG.sizes import SIZE\n\n\n"
                            "class Halves(Chunker):\n    def spans(self, document):\n        return [(0, SIZE)]\n",
         "PKG/sizes.py": "SIZE = 300\n"}, "PKG.Halves", "PKG/sizes.py"),
    "a constant taken with from pkg.sub import NAME": (
        {"PKG/__init__.py": "", "PKG/settings.py": "SIZE = 300\n",
         "PKG/chunker.py": "from PKG.settings import SIZE\n\n\nclass Halves:\n    size = SIZE\n"},
        "PKG.chunker.Halves", "PKG/settings.py"),
    "a relative import of a constant": (
        {"PKG/__init__.py": "", "PKG/settings.py": "SIZE = 300\n",
         "PKG/chunker.py": "from .settings import SIZE\n\n\nclass Halves:\n    size = SIZE\n"},
        "PKG.chunker.Halves", "PKG/settings.py"),
    "the component's class in a subpackage, its constant two dots up": (
        {"PKG/__init__.py": "", "PKG/sizes.py": "SIZE = 300\n", "PKG/parts/__init__.py": "",
         "PKG/parts/halves.py": "from ..sizes import SIZE\n\n\nclass Halves:\n    size = SIZE\n"},
        "PKG.parts.halves.Halves", "PKG/sizes.py"),
    "a module imported by a helper module": (
        {"PKG_chunker.py": "from PKG_helper import size\n\n\nclass Halves:\n    def size(self):\n        return size()\n",
         "PKG_helper.py": "from PKG_sizes import SIZE\n\n\ndef size():\n    return SIZE\n",
         "PKG_sizes.py": "SIZE = 300\n"}, "PKG_chunker.Halves", "PKG_sizes.py"),
    "an import inside a function not yet run": (
        {"PKG/__init__.py": "", "PKG/sizes.py": "SIZE = 300\n",
         "PKG/chunker.py": "class Halves:\n    def size(self):\n        from PKG.sizes import SIZE\n\n        return SIZE\n"},
        "PKG.chunker.Halves", "PKG/sizes.py"),
    "import pkg.sub, used as pkg.sub.NAME": (
        {"PKG/__init__.py": "", "PKG/sizes.py": "SIZE = 300\n",
         "PKG/chunker.py": "import PKG.sizes\n\n\nclass Halves:\n    size = PKG.sizes.SIZE\n"},
        "PKG.chunker.Halves", "PKG/sizes.py"),
}


@pytest.fixture
def user_code(tmp_path, monkeypatch):
    """Writes a shape's files under a package name of its own and puts them on the path; the
    modules imported from there are forgotten afterwards (a new process would not have them)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)

    def write(files: dict[str, str], name: str) -> Path:
        for path, text in files.items():
            file = tmp_path / path.replace("PKG", name)
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(text.replace("PKG", name))
        return tmp_path

    yield write
    for name in set(sys.modules) - before:
        if str(getattr(sys.modules[name], "__file__", None) or "").startswith(str(tmp_path)):
            del sys.modules[name]
    code_hash.cache_clear()


def computed_and_served(cache: StageCache, target: str) -> str:
    """'computed' or 'served': what the stage cache did for the chunks of `target`'s component, as
    a new process would (the code read again)."""
    code_hash.cache_clear()
    before = cache.stats["chunks_computed"]
    cache.cached("chunks", key_of("chunks", {"_target_": target, "chunk_size": 300}), lambda: ["chunk"])
    return "computed" if cache.stats["chunks_computed"] > before else "served"


@pytest.mark.parametrize("shape", list(SHAPES), ids=[f"shape{n}" for n in range(len(SHAPES))])
def test_editing_a_users_module_the_component_imports_is_a_miss(shape, user_code, tmp_path):
    files, target, helper = SHAPES[shape]
    name = f"shape{list(SHAPES).index(shape)}_pkg"
    folder = user_code(files, name)
    target = target.replace("PKG", name)
    code_identity.locate(target)  # the run imports the component before it keys its work
    cache = from_yaml("cache", dir=str(tmp_path / "cache"))
    assert computed_and_served(cache, target) == "computed"
    assert computed_and_served(cache, target) == "served"  # nothing edited
    component = (folder / helper.replace("PKG", name))
    component.write_text(component.read_text().replace("SIZE = 300", "SIZE = 120"))
    assert computed_and_served(cache, target) == "computed"  # the component's own file unchanged
    assert computed_and_served(cache, target) == "served"


def test_a_package_in_the_python_installation_is_not_followed(user_code, tmp_path, monkeypatch):
    """A package installed (not editable) is the environment's: editing it keeps the keys (its
    version goes into a key through `cache_token`, docs/concepts/stage-cache.md)."""
    user_code({"installed_sizes/__init__.py": "SIZE = 300\n",
               "user_chunker.py": "from installed_sizes import SIZE\n\n\nclass Halves:\n    size = SIZE\n"}, "unused")
    installed = (*code_closure.installed_folders(), str((tmp_path / "installed_sizes").resolve()) + "/")
    monkeypatch.setattr(code_closure, "installed_folders", lambda: installed)
    code_identity.locate("user_chunker.Halves")
    cache = from_yaml("cache", dir=str(tmp_path / "cache"))
    assert computed_and_served(cache, "user_chunker.Halves") == "computed"
    (tmp_path / "installed_sizes" / "__init__.py").write_text("SIZE = 120\n")
    assert computed_and_served(cache, "user_chunker.Halves") == "served"
    (tmp_path / "user_chunker.py").write_text("from installed_sizes import SIZE\n\n\nclass Halves:\n    size = SIZE + 1\n")
    assert computed_and_served(cache, "user_chunker.Halves") == "computed"  # the user's own module still counts


def test_ragexps_own_components_read_no_import_statements():
    """A module's import statements are read only when it is the user's (`users`), and no module of
    the code of a component conf/ names is: the rule leaves their keys as they were (their closures
    are what the modules' globals alone give)."""
    targets = sorted({t for p in (ROOT / "conf").rglob("*.yaml") for t in re.findall(r"_target_:\s*(ragexp\.[\w.]+)", p.read_text())})
    assert len(targets) > 40
    for target in targets:
        obj = code_identity.locate(target)
        roots = {getattr(obj, "__module__", None) or target}
        assert not [m for m in code_closure.module_closure(roots) if code_closure.users(m)], target


def test_threads_keying_at_once_compute_each_targets_code_once(user_code, monkeypatch):
    """N threads ask for the keys of the same components at once: each component's code (its module
    closure) is read once, the other threads wait for it. No timing: the one computing waits until
    all N calls are in flight (computing or waiting) before it goes on."""
    user_code({"flight_chunker.py": "from flight_sizes import SIZE\n\n\nclass Halves:\n    size = SIZE\n",
               "flight_sizes.py": "SIZE = 300\n"}, "unused")
    threads_per_target, targets = 8, ["ragexp.judges.triad.TriadJudge", "flight_chunker.Halves"]
    for target in targets:
        code_identity.locate(target)
    code_hash.cache_clear()
    computed: list[str] = []
    real = code_identity.module_closure

    def counted(roots, own_package="ragexp"):
        [target] = [t for t in targets if t.split(".")[0] == own_package]
        computed.append(target)
        with code_hash.changed:  # until every call waits for this one, or another computes too (no deadline)
            code_hash.changed.wait_for(lambda: code_hash.in_flight(target) == threads_per_target or computed.count(target) > 1)
            code_hash.changed.notify_all()
        return real(roots, own_package)

    monkeypatch.setattr(code_identity, "module_closure", counted)
    keys: dict[str, set[str]] = {t: set() for t in targets}
    failures: list[BaseException] = []

    def key(target):
        try:
            keys[target].add(key_of("judgement", {"_target_": target}, "Which port?"))
        except BaseException as err:  # noqa: BLE001 - reported by the test below
            failures.append(err)

    for target in targets:
        threads = [threading.Thread(target=key, args=(target,)) for _ in range(threads_per_target)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not failures
    assert computed == targets  # once each
    assert all(len(found) == 1 for found in keys.values())
    assert all(code_hash.in_flight(t) == 0 for t in targets)


def test_a_runs_components_are_identified_ahead_of_their_stages(monkeypatch):
    """The pipeline reads its components' code on a thread of its own as the run starts: the judge's
    threads later key their questions without reading any code on the judging clock."""
    settings = {"judge": {"_target_": "ragexp.judges.triad.TriadJudge",
                          "endpoint": {"_target_": "ragexp.llm.endpoint.Endpoint", "model": "m"}},
                "chunker": {"_target_": "ragexp.components.chunkers.RecursiveChunker", "chunk_size": 300}}
    code_hash.cache_clear()
    code_identity.identify_ahead(settings).join()
    read: list[set[str]] = []
    monkeypatch.setattr(code_identity, "module_closure", lambda roots, own_package="ragexp": read.append(roots) or set())
    key_of("judgement", settings["judge"], "Which port?")
    key_of("chunks", settings["chunker"])
    assert read == []


def test_a_lone_surrogate_has_a_key_and_valid_text_keeps_its_key():
    """A lone "\\ud800" escape in a recorded output (valid JSON) crashed key_of with a
    UnicodeEncodeError; valid text keeps the key it had (UTF-8 bytes as before)."""
    assert key_of("answer", "Port 7400 \ud800.") != key_of("answer", "Port 7400 \ud801.")
    for text in ("Port 7400.", "Porté 7400 — 端口 🚀"):
        identity = {"ragexp": __import__("ragexp").__version__, "code": {}}
        before = json.dumps([("answer", text), identity], sort_keys=True, ensure_ascii=False, default=str).encode()
        assert key_of("answer", text) == hashlib.sha256(before).hexdigest()
        assert EmbeddingStore.sha(text) == hashlib.sha256(text.encode()).hexdigest()
    assert EmbeddingStore.sha("\ud800") != EmbeddingStore.sha("\ud801")


CHUNKER = """\
from ragexp.components.chunkers import Chunker
from mychunks.sizes import SIZE


class HalvesChunker(Chunker):
    def spans(self, document):
        return [(start, min(start + SIZE, len(document.text))) for start in range(0, len(document.text), SIZE)]
"""


@pytest.mark.process
def test_a_user_package_whose_init_imports_its_constant_is_recomputed_after_an_edit(tmp_path):
    """The reproduction as a new user tried it: mychunks/__init__.py holds HalvesChunker and
    `from mychunks.sizes import SIZE`; SIZE changes from 300 to 120 between two runs of the same
    command: the second run chunks, answers and judges again (it served the old chunks before)."""
    package = tmp_path / "pkg" / "mychunks"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(CHUNKER)
    (package / "sizes.py").write_text("SIZE = 300\n")
    (tmp_path / "cfg" / "chunker").mkdir(parents=True)
    (tmp_path / "cfg" / "chunker" / "halves.yaml").write_text("_target_: mychunks.HalvesChunker\n")
    args = ["--config-dir", "cfg", "chunker=halves", "dataset.limit=3", "retriever=bm25", "embedder@scoring_embedder=hash",
            "tracker=none", f"cache.dir={tmp_path / 'cache'}"]
    env = {"PYTHONPATH": f"{tmp_path / 'pkg'}:{ROOT}"}

    def work() -> dict[str, int]:
        proc = run_cli(*args, cwd=tmp_path, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        [line] = [line for line in proc.stdout.splitlines() if line.strip().startswith("work:")]
        return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}

    first = work()
    assert first["chunks_computed"] == 1 and first["answers_computed"] == 3
    again = work()
    assert again["chunks_cached"] == 1 and again["answers_cached"] == 3 and again["judgements_cached"] == 3
    (package / "sizes.py").write_text("SIZE = 120\n")
    shutil.rmtree(package / "__pycache__", ignore_errors=True)
    edited = work()
    assert edited["chunks_computed"] == 1 and edited["answers_computed"] == 3 and edited["judgements_computed"] == 3
