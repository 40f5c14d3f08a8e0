"""Qdrant that loses nothing, tested against qdrant-client's local mode on a folder (the same client
API as a server): collections named per content, never deleted, shared safely by parallel jobs;
retriever=qdrant_collection searching a team's own collection read-only."""
import json
from pathlib import Path

import pytest
from conftest import run_app

from ragexp.errors import RagexpError
from ragexp.components.retrievers.qdrant import MARK, connect
from ragexp.components.retrievers import DenseRetriever
from ragexp.types import Chunk
from ragexp.config.build import from_yaml

CHUNKS = [
    Chunk("port#0", "port", "The Quarry server listens on port 7400 by default."),
    Chunk("dlq#0", "dlq", "Jobs that fail five times are moved to the dead-letter queue."),
    Chunk("auth#0", "auth", "Clients authenticate with a bearer token in the Authorization header."),
]
OTHER = [Chunk("cron#0", "cron", "Recurring jobs are declared with a cron expression."),
         Chunk("k8s#0", "k8s", "The Helm chart deploys Quarry as a StatefulSet on Kubernetes.")]


def job(store: Path, chunks, **settings) -> DenseRetriever:
    retriever = from_yaml("retriever/dense", embedder=from_yaml("embedder/hash"), top_k=1, path=str(store), **settings)
    retriever.index(chunks)
    return retriever


def best(retriever, query: str) -> str:
    return retriever.search([query])[0][0].chunk.chunk_id


def test_two_jobs_on_one_store_share_a_collection_per_content_and_delete_nothing(tmp_path):
    store = tmp_path / "qdrant"
    first = job(store, CHUNKS)
    client = connect(None, str(store), None)
    before = client.get_collection(first.name)
    second = job(store, CHUNKS)  # the same chunks and embedder: the same collection, reused as it is
    assert second.name == first.name and first.name.startswith("ragexp_")
    assert client.count(first.name, exact=True).count == 3
    assert best(first, "which port does the server listen on") == "port#0"  # first's collection is intact
    third = job(store, OTHER)  # other content: a collection of its own
    assert third.name != first.name
    assert sorted(c.name for c in client.get_collections().collections) == sorted([first.name, third.name])
    assert best(first, "dead-letter queue") == "dlq#0" and best(third, "Kubernetes Helm chart") == "k8s#0"
    assert client.get_collection(first.name).points_count == before.points_count


def test_a_job_that_finds_another_jobs_collection_half_written_completes_it_and_both_search(tmp_path):
    """Job A has created the collection and written its first batch when job B indexes the same
    content: B writes the same points again (upserts by chunk position, idempotent) and searches;
    A then writes its remaining batches: the collection ends with one copy of each chunk."""
    from ragexp.components.retrievers.qdrant import content_hash, fill_collection

    store = tmp_path / "qdrant"
    embedder = from_yaml("embedder/hash")
    vectors = embedder.embed([c.text for c in CHUNKS])
    content = content_hash(CHUNKS, embedder.key(), vectors.shape[1])
    name = f"ragexp_{content[:24]}"
    client = connect(None, str(store), None)
    fill_collection(client, name, vectors[:1], content, False)  # A, stopped after its first batch
    b = job(store, CHUNKS)
    assert b.name == name and client.count(name, exact=True).count == 3
    assert fill_collection(client, name, vectors, content, False) is True  # A goes on: nothing left to write
    assert client.count(name, exact=True).count == 3
    assert best(b, "bearer token Authorization header") == "auth#0"
    assert [c.name for c in client.get_collections().collections] == [name]


def test_a_collection_ragexp_did_not_make_is_never_deleted_nor_written(tmp_path):
    from qdrant_client import models

    store = tmp_path / "qdrant"
    client = connect(None, str(store), None)
    client.create_collection("production", vectors_config=models.VectorParams(size=384, distance=models.Distance.COSINE))
    client.upsert("production", points=[models.PointStruct(id=7, vector=[1.0] + [0.0] * 383, payload={"text": "theirs"})])
    with pytest.raises(RagexpError, match=r"^retriever\.collection: collection 'production' holds other points"):
        job(store, CHUNKS, collection="production")
    [point] = client.retrieve("production", ids=[7], with_payload=True)
    assert point.payload == {"text": "theirs"} and client.count("production", exact=True).count == 1
    client.create_collection("small", vectors_config=models.VectorParams(size=8, distance=models.Distance.COSINE))
    with pytest.raises(RagexpError, match=r"^retriever\.collection: collection 'small' exists with other vectors"):
        job(store, CHUNKS, collection="small")
    named = job(store, CHUNKS, collection="mine")  # a name of one's own: created, then reused
    assert job(store, CHUNKS, collection="mine").name == "mine" and best(named, "dead-letter") == "dlq#0"
    with pytest.raises(RagexpError, match="holds other points"):  # other chunks under that name
        job(store, OTHER, collection="mine")
    assert client.count("mine", exact=True).count == 3
    [mine] = client.retrieve("mine", ids=[0], with_payload=True)
    assert set(mine.payload) == {MARK}


def team_collection(store: Path, fields=("content", "source")):
    """A team's own collection, made without ragexp: named vectors, its own payload fields."""
    from qdrant_client import QdrantClient, models

    client = QdrantClient(path=str(store))
    client.create_collection("team", vectors_config={"text": models.VectorParams(size=384, distance=models.Distance.COSINE)})
    embedder = from_yaml("embedder/hash")
    texts = {"doc0": "Component 0 listens on port 7400.", "doc1": "Component 1 listens on port 7401.",
             "doc2": "Component 2 listens on port 7402."}
    vectors = embedder.embed(list(texts.values()))
    client.upsert("team", points=[
        models.PointStruct(id=100 + i, vector={"text": v.tolist()}, payload={fields[0]: text, fields[1]: doc})
        for i, ((doc, text), v) in enumerate(zip(texts.items(), vectors))])
    client.close()


def test_qdrant_collection_searches_a_teams_collection_read_only(tmp_path):
    store = tmp_path / "team-store"
    team_collection(store)
    retriever = from_yaml("retriever/qdrant_collection", embedder=from_yaml("embedder/hash"), collection="team", path=str(store), text_field="content", doc_id_field="source", vector_name="text", top_k=2)
    retriever.index([])
    [hits] = retriever.search(["Which port does component 1 use?"])
    assert hits[0].chunk.doc_id == "doc1" and hits[0].chunk.text == "Component 1 listens on port 7401."
    assert hits[0].chunk.chunk_id == "101" and len(hits) == 2
    client = connect(None, str(store), None)
    assert [c.name for c in client.get_collections().collections] == ["team"]
    assert client.count("team", exact=True).count == 3
    wrong = from_yaml("retriever/qdrant_collection", embedder=from_yaml("embedder/hash"), collection="team", path=str(store), text_field="body", doc_id_field="source", vector_name="text")
    with pytest.raises(RagexpError, match=r"^retriever\.text_field: the points of collection 'team' have no payload "
                                          r"field 'body' \(point 100; fields: content, source\)$"):
        wrong.index([])


def sample_data(root: Path) -> Path:
    data = root / "data"
    (data / "docs").mkdir(parents=True)
    for n in range(3):
        (data / "docs" / f"doc{n}.txt").write_text(f"Component {n} listens on port {7400 + n}.")
    rows = [{"id": str(n), "question": f"Which port does component {n} use?", "answer": f"Port {7400 + n}.",
             "golden_docs": [f"doc{n}"]} for n in range(3)]
    (data / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data


def test_a_run_over_a_teams_collection_and_its_bad_payload_field(tmp_path):
    store, data = tmp_path / "team-store", sample_data(tmp_path)
    team_collection(store)
    args = ["retriever=qdrant_collection", "retriever.collection=team", f"retriever.path={store}",
            "retriever.text_field=content", "retriever.doc_id_field=source", "retriever.vector_name=text",
            f"dataset.path={data}", "embedder=hash", "embedder@scoring_embedder=hash", "tracker=none",
            f"cache.dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}"]
    done = run_app(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    [values] = results.values()
    assert values["hit_rate_at_1"] == 1.0  # each question finds its golden document first
    again = run_app(*args, f"hydra.run.dir={tmp_path / 'again'}", cwd=tmp_path)
    [work] = [ln for ln in again.stdout.splitlines() if ln.strip().startswith("work:")]
    counts = dict(pair.split("=") for pair in work.split(":", 1)[1].strip().split(", "))
    assert counts["chunks_cached"] == "1"  # the same chunks, from the cache
    assert counts.get("hits_cached", "0") == "0" and counts.get("question_hits_cached", "0") == "0"  # searched again
    bad = run_app(*args, "retriever.doc_id_field=url", cwd=tmp_path)
    assert bad.returncode == 2
    [line] = [ln for ln in bad.stderr.splitlines() if "retriever.doc_id_field" in ln]
    assert "no payload field 'url'" in line and "Traceback" not in bad.stderr


def test_qdrant_collection_needs_a_collection_and_a_place(tmp_path):
    with pytest.raises(RagexpError, match=r"^retriever\.collection: name the Qdrant collection"):
        from_yaml("retriever/qdrant_collection", embedder=from_yaml("embedder/hash"), path=str(tmp_path)).index([])
    with pytest.raises(RagexpError, match=r"^retriever\.url: give the Qdrant server"):
        from_yaml("retriever/qdrant_collection", embedder=from_yaml("embedder/hash"), collection="team").index([])
    with pytest.raises(RagexpError, match=r"^retriever\.collection: no collection 'team' at "):
        from_yaml("retriever/qdrant_collection", embedder=from_yaml("embedder/hash"), collection="team", path=str(tmp_path / "empty")).index([])
