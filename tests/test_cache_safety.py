"""A cache that cannot hurt: nothing read from the cache folder runs code, a damaged or foreign
entry is a miss with one warning per stage, a code change is a miss, an unusable folder or SQLite
file gives one warning and the run goes on, and failed LLM replies are never cached."""
import contextlib
import errno
import importlib
import json
import logging
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, TEST_KEY_ENV, compose, llm_args, run_cli
from openai_server import auto_reply, task

from ragexp.store.cache import key_of
from ragexp.store.code_identity import code_hash
from ragexp.errors import QuestionFailed
from ragexp.llm.cache import ResponseCache
from ragexp.llm.client import ChatClient, ChatRequest
from ragexp.llm.usage import Prices, Usage
from ragexp.run.pipeline import run
from ragexp.types import Answer, Chunk, Hit, Judgement
from ragexp.config.build import from_yaml

FAST = ["embedder=hash", "embedder@scoring_embedder=hash", "retriever=bm25", "tracker=none", "retriever.top_k=2"]
ENV = {TEST_KEY_ENV: "sk-test", "PYTHONPATH": str(ROOT)}  # this checkout's ragexp in subprocesses


def tiny_dataset(root: Path, docs: int = 3) -> Path:
    data = root / "data"
    (data / "docs").mkdir(parents=True)
    for n in range(docs):
        (data / "docs" / f"doc{n}.txt").write_text(
            f"Topic {n} is about subject number {n}. " + f"Component {n} listens on port {7400 + n}. " * 8)
    rows = [{"id": str(n), "question": f"Which port does component {n} use?", "answer": f"Port {7400 + n}.",
             "golden_docs": [f"doc{n}"]} for n in range(docs)]
    (data / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data


def work(data, cache_dir, *overrides):
    return run(compose(f"dataset.path={data}", f"cache.dir={cache_dir}", *FAST, *overrides))


def cache_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "cache" in r.getMessage()]


class Planted:
    """Unpickling this runs a shell command that creates `marker`."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_planted_pickle_is_never_executed(tmp_path, caplog):
    data, cache_dir = tiny_dataset(tmp_path), tmp_path / "cache"
    first = work(data, cache_dir)
    marker = tmp_path / "pwned"
    payload = pickle.dumps(Planted(marker))
    entries = list(cache_dir.rglob("*.json"))
    assert {e.relative_to(cache_dir).parts[0] for e in entries} == {"chunks", "hits", "question_hits", "answers",
                                                                     "judgements", "stage_seconds"}
    for entry in entries:
        entry.write_bytes(payload)  # in place of every entry
        entry.with_suffix(".pkl").write_bytes(payload)  # and where ragexp once kept its pickles
    caplog.clear()
    again = work(data, cache_dir)
    assert not marker.exists()
    c = again.counters
    assert c["chunks_computed"] == 1 and c["judgements_computed"] == 3 and c["judgements_unreadable"] == 3
    assert again.aggregates["overall_score"] == first.aggregates["overall_score"]
    skipped = [m for m in cache_warnings(caplog) if "skipping unreadable" in m]
    assert sorted(m.split()[3] for m in skipped) == ["answers", "chunks", "hits", "judgements",
                                                     "question_hits"]  # one per stage


def test_a_corrupted_or_foreign_entry_is_a_miss_with_one_warning(tmp_path, caplog):
    data, cache_dir = tiny_dataset(tmp_path), tmp_path / "cache"
    work(data, cache_dir)
    judgements = sorted((cache_dir / "judgements").rglob("*.json"))
    judgements[0].write_text(judgements[0].read_text()[:40])  # cut short
    entry = json.loads(judgements[1].read_text())
    entry["value"] = {"os.system": {"command": "true"}}  # a record type ragexp does not know
    judgements[1].write_text(json.dumps(entry))
    judgements[2].write_text(judgements[1].read_text().replace(entry["key"], "0" * 64))  # another key's entry
    caplog.clear()
    again = work(data, cache_dir)
    c = again.counters
    assert c["judgements_computed"] == 3 and c["judgements_unreadable"] == 3 and c["answers_cached"] == 3
    assert len(cache_warnings(caplog)) == 1
    assert again.aggregates["failed_questions"] == 0
    assert work(data, cache_dir).counters["judgements_cached"] == 3  # rewritten whole


def test_every_record_comes_back_from_disk_as_it_was_stored(tmp_path):
    chunk = Chunk("d#0", "d", "text é", 0, 6)
    hits = [[Hit(chunk, 0.5, 1), Hit(Chunk("d#1", "d", "more"), -1.25, 2)], []]
    repeat = Judgement("triad", {"faithfulness": 0.5}, 0.25, "r1",
                       {"claims": ["a"], "claim_verdicts": [{"claim": "a", "supported": True}]})
    judgement = Judgement("triad", {"faithfulness": 0.75}, 0.125, "both", {"repeat_scores": [{"f": 1.0}]},
                          (repeat, repeat))
    values = {"chunks": [chunk], "hits": hits, "answers": Answer("It is 7400.", 0.01),
              "judgements": judgement, "plain": {"n": [1, 2.5, None, True]},
              "verdict": Judgement("llm", {"faithfulness": 9.0}, True, "ok")}
    for stage, value in values.items():
        from_yaml("cache", dir=str(tmp_path)).cached(stage, key_of(stage), lambda value=value: value)
    fresh = from_yaml("cache", dir=str(tmp_path))
    for stage, value in values.items():
        assert fresh.cached(stage, key_of(stage), lambda: pytest.fail("computed again")) == value
    assert fresh.cached("verdict", key_of("verdict"), lambda: None).hallucination is True
    assert fresh.stats["judgements_cached"] == 1 and not any(k.endswith("_computed") for k in fresh.stats)


CHUNKER = """\
from ragexp.components.chunkers import RecursiveChunker


class EditedChunker(RecursiveChunker):
    edition = "{doc}"
"""


def test_editing_a_components_code_is_a_miss(tmp_path, monkeypatch):
    """The chunker's class lives in a module of its own; editing that file changes the keys of
    its chunks (and so of everything after them); an unchanged file keeps them."""
    module = tmp_path / "edited_chunker.py"
    module.write_text(CHUNKER.format(doc="version one"))
    monkeypatch.syspath_prepend(str(tmp_path))
    data, cache_dir = tiny_dataset(tmp_path), tmp_path / "cache"
    target = "chunker._target_=edited_chunker.EditedChunker"
    assert work(data, cache_dir, target).counters["chunks_computed"] == 1
    code_hash.cache_clear()  # sources are hashed once per process: this is a new "process"
    assert work(data, cache_dir, target).counters["chunks_cached"] == 1
    module.write_text(CHUNKER.format(doc="version two"))
    code_hash.cache_clear()
    edited = work(data, cache_dir, target).counters
    assert edited["chunks_computed"] == 1 and edited["hits_computed"] == 1
    before = code_hash("edited_chunker.EditedChunker")
    code_hash.cache_clear()
    assert code_hash("edited_chunker.EditedChunker") == before
    assert key_of({"_target_": "edited_chunker.EditedChunker"}) != key_of({"_target_": "ragexp.components.chunkers.RecursiveChunker"})


HELPED_CHUNKER = """\
from ragexp.components.chunkers import RecursiveChunker
from chunk_rules import size_for


class HelpedChunker(RecursiveChunker):
    def __init__(self, chunk_size, chunk_overlap, **settings):
        super().__init__(size_for(chunk_size), chunk_overlap, **settings)
"""


def test_editing_a_user_components_helper_module_is_a_miss(tmp_path, monkeypatch):
    """The component's module is unchanged; the helper module it imports (a module of the user's,
    outside the Python installation and outside ragexp) changes: its chunks are computed again."""
    (tmp_path / "helped_chunker.py").write_text(HELPED_CHUNKER)
    helper = tmp_path / "chunk_rules.py"
    helper.write_text("def size_for(n):\n    return n\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    data, cache_dir = tiny_dataset(tmp_path), tmp_path / "cache"
    target = "chunker._target_=helped_chunker.HelpedChunker"
    assert work(data, cache_dir, target).counters["chunks_computed"] == 1
    code_hash.cache_clear()
    assert work(data, cache_dir, target).counters["chunks_cached"] == 1
    helper.write_text("def size_for(n):\n    return n // 2  # smaller chunks\n")
    import importlib
    import sys as system

    importlib.reload(system.modules["chunk_rules"])  # a new process would import the edited helper
    code_hash.cache_clear()
    assert work(data, cache_dir, target).counters["chunks_computed"] == 1


class VersionedService:
    """A component whose results depend on a service's state its code does not show."""

    version = "model-1"

    def __init__(self, url: str):
        self.url = url

    @classmethod
    def cache_token(cls, url: str) -> str:
        return f"{url} serves {cls.version}"


def test_a_cache_token_puts_outside_state_in_the_key(monkeypatch):
    node = {"_target_": f"{__name__}.VersionedService", "url": "http://127.0.0.1:1/v1"}
    before = key_of("answers", node)
    assert key_of("answers", node) == before  # asked again: the same state, the same key
    monkeypatch.setattr(VersionedService, "version", "model-2")
    assert key_of("answers", node) != before  # the service changed: a miss
    # a component without cache_token keeps the key it had before tokens existed
    plain = {"_target_": "ragexp.components.chunkers.RecursiveChunker", "chunk_size": 100}
    from ragexp.store.code_identity import code_hash as hashed

    identity = {"ragexp": __import__("ragexp").__version__, "code": {plain["_target_"]: hashed(plain["_target_"])}}
    import hashlib

    expected = hashlib.sha256(json.dumps([("k", plain), identity], sort_keys=True, ensure_ascii=False,
                                         default=str).encode()).hexdigest()
    assert key_of("k", plain) == expected


def test_a_failing_cache_token_is_one_clear_error(monkeypatch):
    from ragexp.errors import RagexpError

    def broken(cls, url):
        raise ConnectionError("service down")

    monkeypatch.setattr(VersionedService, "cache_token", classmethod(broken))
    with pytest.raises(RagexpError, match=r"VersionedService.cache_token\(\) failed \(ConnectionError: service down\)"):
        key_of({"_target_": f"{__name__}.VersionedService", "url": "u"})


def test_the_git_commit_says_when_the_checkout_differs_from_it(tmp_path):
    import subprocess

    from ragexp.store.provenance import git_commit

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", "code.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    commit = git_commit(tmp_path)
    assert len(commit) == 40 and not commit.endswith("-dirty")
    (tmp_path / "notes.txt").write_text("untracked")  # not code that ran: still clean
    assert git_commit(tmp_path) == commit
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_commit(tmp_path) == commit + "-dirty"
    assert git_commit(tmp_path.parent / "nowhere") == "unknown"


def test_an_unwritable_cache_folder_gives_one_message_and_the_run_goes_on(tmp_path, caplog):
    data = tiny_dataset(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = work(data, blocker / "cache")
    assert result.aggregates["failed_questions"] == 0 and result.counters["judgements_computed"] == 3
    [message] = cache_warnings(caplog)
    assert message.startswith(f"cache.dir: cannot write to {blocker / 'cache'}") and "uncached" in message


CAP_DAC_OVERRIDE = 1  # linux/capability.h: the capability that lets root write where the mode forbids it


@contextlib.contextmanager
def as_an_ordinary_user():
    """Read-only means read-only for the block, also when the tests run as root (CI does): root's
    CAP_DAC_OVERRIDE leaves this thread's effective set (threads started in the block inherit
    that) and comes back after it (it stays in the permitted set)."""
    if os.geteuid() != 0:
        yield
        return
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    libc = ctypes.CDLL(None, use_errno=True)
    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words

    def call(name):
        if getattr(libc, name)(ctypes.byref(header), data) != 0:
            raise OSError(ctypes.get_errno(), f"{name} failed")

    call("capget")
    saved = data[0].effective
    data[0].effective = saved & ~(1 << CAP_DAC_OVERRIDE)
    call("capset")
    try:
        yield
    finally:
        data[0].effective = saved
        call("capset")


def test_a_read_only_cache_folder_gives_one_message(tmp_path, caplog):
    data, cache_dir = tiny_dataset(tmp_path), tmp_path / "cache"
    cache_dir.mkdir()
    cache_dir.chmod(0o555)
    try:
        with as_an_ordinary_user():
            with pytest.raises(PermissionError):  # the folder is read-only for this test, root or not
                (cache_dir / "probe").write_text("x")
            result = work(data, cache_dir)
    finally:
        cache_dir.chmod(0o755)
    assert result.aggregates["failed_questions"] == 0
    assert len(cache_warnings(caplog)) == 1 and not list(cache_dir.iterdir())


def test_no_space_left_gives_one_message_and_leaves_no_temporary_file(tmp_path, monkeypatch, caplog):
    """ENOSPC injected at the filesystem call (the rename that publishes an entry), for files under
    the cache folder only: the entry's temporary file is removed and the run goes on uncached."""
    data, cache_dir = tiny_dataset(tmp_path), tmp_path / "cache"
    real_replace = os.replace

    def disk_full(src, dst, *args, **kwargs):
        if str(dst).startswith(str(cache_dir)):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", disk_full)
    result = work(data, cache_dir)
    assert result.aggregates["failed_questions"] == 0 and result.counters["judgements_computed"] == 3
    [message] = cache_warnings(caplog)
    assert "No space left on device" in message and "the run goes on uncached" in message
    assert not [p for p in cache_dir.rglob("*") if p.is_file() and p.name not in ("embeddings.sqlite", "CACHEDIR.TAG")
                and not p.name.startswith("embeddings.sqlite-")]
    monkeypatch.undo()
    assert work(data, cache_dir).counters["chunks_computed"] == 1  # nothing was stored


FULL_DISK = """\
import json, resource, signal, sys
sys.path.insert(0, {tests!r})
from conftest import compose
from ragexp.run.pipeline import run
cfg = compose(*sys.argv[1:])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
result = run(cfg)
print(json.dumps({{"failed": result.aggregates["failed_questions"], "counters": result.counters}}))
"""


def test_a_full_disk_during_a_run_gives_one_message_per_store_and_no_temporary_files(tmp_path, server):
    """A real write failure, no patching: the process may not write a file larger than 3000 bytes
    (RLIMIT_FSIZE), so the chunks' entry, the embedding store and the LLM cache fail mid-run."""
    data, cache_dir = tiny_dataset(tmp_path, docs=6), tmp_path / "cache"
    script = FULL_DISK.format(tests=str(Path(__file__).parent), limit=3000)
    args = [f"dataset.path={data}", f"cache.dir={cache_dir}", *FAST, *llm_args(server, generator=False)[1:]]
    proc = subprocess.run([sys.executable, "-c", script, *args], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, **ENV}, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["failed"] == 0 and report["counters"]["judgements_computed"] == 6
    warnings = [line for line in proc.stderr.splitlines() if "cache" in line and "WARNING" in line or "cannot" in line]
    assert len([w for w in warnings if "cache.dir: cannot write" in w]) == 1, proc.stderr
    assert len([w for w in warnings if "embeddings.sqlite cannot be used" in w]) == 1, proc.stderr
    assert len([w for w in warnings if "responses.sqlite cannot be used" in w]) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not [p for p in cache_dir.rglob("*") if p.name.startswith(".tmp-")]
    assert len(server.chat_requests()) == 6


def test_garbage_sqlite_files_are_bypassed_with_one_warning_each(tmp_path, server):
    data, cache_dir = tiny_dataset(tmp_path), tmp_path / "cache"
    (cache_dir / "llm").mkdir(parents=True)
    for file in (cache_dir / "embeddings.sqlite", cache_dir / "llm" / "responses.sqlite"):
        file.write_bytes(b"this is not a database " * 100)
    proc = run_cli(f"dataset.path={data}", f"cache.dir={cache_dir}", *FAST, *llm_args(server, generator=False)[1:],
                   "hydra.run.dir=out", cwd=tmp_path, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert "failed_questions                     0" in proc.stdout
    out = proc.stdout + proc.stderr
    assert out.count("embeddings.sqlite cannot be used") == 1 and out.count("responses.sqlite cannot be used") == 1
    assert "Traceback" not in out


def test_unreadable_replies_and_failed_reasks_are_not_cached(tmp_path, server):
    """Against a judge that replies garbage (and garbage again when asked once more) the questions
    fail; the same command against a healthy endpoint sends every judge request again."""
    data, cache_dir = tiny_dataset(tmp_path), tmp_path / "cache"
    args = [f"dataset.path={data}", f"cache.dir={cache_dir}", *FAST, *llm_args(server, generator=False)[1:]]
    server.chat = lambda body: "I'd rather not say." if task(body) == "judge" else auto_reply(body)
    broken = run_cli(*args, "hydra.run.dir=broken", cwd=tmp_path, env=ENV)
    assert "failed_questions                     3" in broken.stdout, broken.stdout + broken.stderr
    assert len(server.chat_requests()) == 6  # each question: the request and its re-ask
    assert len(ResponseCache(cache_dir / "llm")) == 0

    server.chat = auto_reply
    healthy = run_cli(*args, "hydra.run.dir=healthy", cwd=tmp_path, env=ENV)
    assert healthy.returncode == 0, healthy.stderr
    assert "failed_questions                     0" in healthy.stdout
    assert len(server.chat_requests()) == 6 + 3
    assert len(ResponseCache(cache_dir / "llm")) == 3


def test_a_readable_reask_is_cached_but_not_the_reply_it_corrects(tmp_path, server):
    data, cache_dir = tiny_dataset(tmp_path, docs=1), tmp_path / "cache"
    args = [f"dataset.path={data}", f"cache.dir={cache_dir}", *FAST, *llm_args(server, generator=False)[1:]]
    server.chat = lambda body: (auto_reply(body) if len(body["messages"]) > 2 or task(body) != "judge"
                                else '{"context_relevance": 5, "answer_')
    first = run_cli(*args, "hydra.run.dir=first", cwd=tmp_path, env=ENV)
    assert "failed_questions                     0" in first.stdout, first.stdout + first.stderr
    stored = ResponseCache(cache_dir / "llm").db().execute("SELECT request FROM replies").fetchall()
    assert [len(json.loads(r)["messages"]) for (r,) in stored] == [4]  # the re-ask only


def endpoint_client(server, usage, **settings):
    endpoint = from_yaml("endpoint/openai", base_url=server.base_url, model="m", api_key_env=None, backoff_s=0.01, timeout_s=60, **settings)
    return ChatClient(endpoint, "judge", "sk-test", usage, Prices({}), None)


def test_a_truncated_json_body_is_retried_and_counted(server):
    server.faults = ["truncated"]
    usage = Usage()
    reply = endpoint_client(server, usage).complete(ChatRequest((("user", "hello"),)))
    assert reply.text == "The documents say so [Doc 1]."
    assert len(server.chat_requests()) == 2
    stats = usage.stats()
    assert stats["llm_requests"] == 1 and stats["llm_retries"] == 1 and stats["llm_failures"] == 0

    server.faults = ["truncated"] * 3
    with pytest.raises(QuestionFailed, match=r"judge: a truncated or invalid JSON body .* after 3 attempts"):
        endpoint_client(server, usage, max_retries=2).complete(ChatRequest((("user", "again"),)))
    stats = usage.stats()
    assert stats["llm_failures"] == 1 and stats["llm_retries"] == 3 and len(server.chat_requests()) == 5


RULES = '''\
"""{doc}"""
from {package} import helpers


class Rule:
    """{doc}"""

    def size(self, n):
        return helpers.halved(n)  # {doc}
'''


def test_a_module_moved_to_another_package_keeps_its_keys(tmp_path, monkeypatch):
    """The same code in another package (its imports rewritten, its docs and comments reworded)
    has the same code identity, so a stage cache filled before a move is hit after it; an edit of
    what the code runs is a miss."""
    from ragexp.store.code_identity import stage_code_hash

    for package, doc in (("old_place", "before the move"), ("new_home.deep", "after the move, reworded")):
        folder = tmp_path.joinpath(*package.split("."))
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text("")
        (folder / "helpers.py").write_text(f'"""{doc}"""\n\n\ndef halved(n):\n    return n // 2\n')
        (folder / "rules.py").write_text(RULES.format(doc=doc, package=package))
    (tmp_path / "new_home" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    old, new = importlib.import_module("old_place.rules"), importlib.import_module("new_home.deep.rules")
    assert code_hash("old_place.rules.Rule") == code_hash("new_home.deep.rules.Rule")
    assert stage_code_hash(old.Rule().size) == stage_code_hash(new.Rule().size)
    (tmp_path / "new_home" / "deep" / "helpers.py").write_text("def halved(n):\n    return n // 3\n")
    importlib.reload(importlib.import_module("new_home.deep.helpers"))
    code_hash.cache_clear()
    assert code_hash("old_place.rules.Rule") != code_hash("new_home.deep.rules.Rule")


STAGE_MODULE = {
    "base": 'from {helpers} import halved\n\nSIZE = 8\n\n\nclass Splitter:\n    def size(self):\n        return halved(SIZE)\n',
    "words": 'class Words(Splitter):\n    def split(self, text):\n        return text.split()[: self.size()]\n',
    "lines": 'class Lines(Splitter):\n    def split(self, text):\n        return text.splitlines()\n',
}


def test_a_module_split_into_a_package_that_gathers_it_keeps_its_keys(tmp_path, monkeypatch):
    """A stage's module split in order into a package (base.py and a module a family, gathered by
    its __init__) has the keys it had: the package is read as one module; editing any of its
    modules, even one the component does not use, is a miss, as it was in the one file."""
    (tmp_path / "helpers.py").write_text("def halved(n):\n    return n // 2\n")
    (tmp_path / "whole.py").write_text("from helpers import halved\n" + "\n\n".join(
        code.partition("\n\n")[2] if name == "base" else code for name, code in STAGE_MODULE.items()))
    split = tmp_path / "split"
    split.mkdir()
    (split / "__init__.py").write_text('"""A stage: its contract first."""\n' + "".join(
        f"from .{name} import *  # noqa: F403\n" for name in STAGE_MODULE))
    for name, code in STAGE_MODULE.items():
        (split / f"{name}.py").write_text(("" if name == "base" else "from split.base import Splitter\n\n\n")
                                          + code.format(helpers="helpers"))
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("whole"), importlib.import_module("split")
    assert code_hash("whole.Words") == code_hash("split.Words") == code_hash("split.words.Words")
    (split / "lines.py").write_text("from split.base import Splitter\n\n\nclass Lines(Splitter):\n    pass\n")
    code_hash.cache_clear()
    assert code_hash("split.Words") != code_hash("whole.Words")


def test_a_components_identity_does_not_depend_on_what_else_the_process_imported(tmp_path, monkeypatch):
    """A loader whose package holds shared code has one identity, whether or not the process also
    imported the package's other loaders (each import sets the submodule on its package): before,
    a run and a sweep over several datasets knew the same loader by two keys."""
    loaders = tmp_path / "loaders"
    loaders.mkdir()
    (loaders / "__init__.py").write_text("def common(text):\n    return text.strip()\n")
    (loaders / "one.py").write_text("from loaders import common\n\n\nclass One:\n    def read(self, t):\n        return common(t)\n")
    (loaders / "two.py").write_text("class Two:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("loaders.one")
    alone = code_hash("loaders.one.One")
    importlib.import_module("loaders.two")
    code_hash.cache_clear()
    assert code_hash("loaders.one.One") == alone
    (loaders / "__init__.py").write_text("def common(text):\n    return text\n")
    importlib.reload(importlib.import_module("loaders"))
    code_hash.cache_clear()
    assert code_hash("loaders.one.One") != alone  # the package's own code is part of it


@pytest.mark.parametrize("damage", ["score", "type"])
def test_a_well_formed_entry_with_a_wrong_value_is_recomputed_not_used(tmp_path, damage, caplog):
    """An entry with the right header and key but a judgement score of 1e308 (averaged as it was), or
    another record where an answer belongs (it crashed the run): counted unreadable, computed again."""
    data, cache_dir = tiny_dataset(tmp_path), tmp_path / "cache"
    first = work(data, cache_dir)
    stage = "judgements" if damage == "score" else "answers"
    for path in (cache_dir / stage).rglob("*.json"):
        text = path.read_text()
        if damage == "score":
            changed = re.sub(r'"faithfulness": [0-9.]+', '"faithfulness": 1e308', text)
        else:  # an answer entry whose value is a chunk, well formed
            changed = re.sub(r'\{"Answer": \{.*\}\}', '{"Chunk": {"chunk_id": "c", "doc_id": "d", "text": "t", '
                             '"start": 0, "end": 1}}', text, flags=re.S)
        assert changed != text
        path.write_text(changed)
    again = work(data, cache_dir)
    assert again.counters[f"{stage}_unreadable"] == 3
    assert again.aggregates == first.aggregates
    assert any("recomputed" in message for message in cache_warnings(caplog))


def test_a_moved_module_keeps_its_old_name_for_configs_and_keys():
    """A config an older run logged names a class by the path it had before its module moved: it
    still resolves (to the class itself), and the stage cache's key is the same under either name."""
    from hydra.utils import get_class

    from ragexp.base.moved import MOVED
    from ragexp.components.retrievers.exact_dense import ExactDenseRetriever
    from ragexp.store.code_identity import key_of

    old, new = "ragexp.components.exact_dense.ExactDenseRetriever", "ragexp.components.retrievers.exact_dense.ExactDenseRetriever"
    assert get_class(old) is ExactDenseRetriever and importlib.import_module(old.rpartition(".")[0]).__name__ == MOVED[old.rpartition(".")[0]]
    node = {"top_k": 5, "embedder": {"_target_": "ragexp.components.embedders.HashEmbedder", "dim": 64}}
    assert key_of("hits", {**node, "_target_": old}) == key_of("hits", {**node, "_target_": new})
    assert key_of("hits", {**node, "_target_": new}) != key_of("hits", {**node, "_target_": "ragexp.components.retrievers.DenseRetriever"})
    for old_module in MOVED:  # every old name imports
        assert importlib.import_module(old_module).__spec__.name == MOVED[old_module]
