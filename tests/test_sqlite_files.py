"""The SQLite files several processes share (LLM replies, embeddings, the MLflow store) are made
under one lock, so two processes never make one's tables at the same moment."""
import sqlite3
import subprocess
import sys
import time

import pytest

from conftest import cli_env
from ragexp.base.sqlite_files import creation_lock, shared

SCHEMA = "CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY)"


def test_a_file_is_made_in_wal_mode_with_its_table(tmp_path):
    db = shared(tmp_path / "a.sqlite", SCHEMA)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.execute("INSERT INTO t VALUES ('x')")
    db.commit()
    assert sqlite3.connect(tmp_path / "a.sqlite").execute("SELECT k FROM t").fetchall() == [("x",)]


@pytest.mark.process  # timing is its subject: another process seen waiting 3 s
def test_another_process_waits_for_the_lock_before_it_makes_the_file(tmp_path):
    """While this process holds the creation lock, a process opening the reply cache makes nothing;
    it makes the file once the lock is let go, and its reply is stored."""
    code = ("import sys; from ragexp.llm.cache import ResponseCache\n"
            "c = ResponseCache(sys.argv[1]); c.put('k', {}, {'text': 't', 'input_tokens': 1, 'output_tokens': 1})\n"
            "assert c.get('k')['text'] == 't'\n")
    database = tmp_path / "responses.sqlite"
    with creation_lock(database):
        process = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], env=cli_env())
        time.sleep(3)
        assert process.poll() is None and not database.exists()
    assert process.wait(timeout=120) == 0 and database.exists()
