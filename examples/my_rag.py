"""A tiny RAG system of "your own", for `system=python` (and behind examples/http_service.py).

    cd examples && python -m ragexp system=python system.function=my_rag:answer \
        dataset=outputs dataset.path=recorded_outputs.jsonl system.params.top_k=2

`answer(question, params)` retrieves the `top_k` documents sharing the most words with the question
and answers with the best one's first sentence: a stand-in for your retriever and LLM."""
import re

DOCS = {
    "installation": "The official image ghcr.io/quarry-dev/quarryd runs as UID 10001. It listens on port 7070.",
    "job-lifecycle": "Heartbeats can keep a job active for at most 12 hours. After that the lease expires.",
    "priorities-and-deduplication": "Dedupe keys can be up to 256 bytes long. Longer keys are rejected.",
    "faq": "There is no hard limit on queues, but the tested soft limit is 10,000 queues per deployment.",
    "authentication": "In OIDC mode quarryd refreshes the signing keys of the issuer every 15 minutes.",
    "kubernetes-deployment": "The Helm chart requires Kubernetes 1.26 or later and Helm 3.12 or later.",
}


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def answer(question: str, params: dict) -> dict:
    """{"answer": text, "contexts": [{"doc_id", "text", "score"}, ...]}, best context first."""
    top_k = int(params.get("top_k", 2))
    scored = sorted(((len(words(question) & words(text)), doc_id) for doc_id, text in DOCS.items()), reverse=True)
    contexts = [{"doc_id": doc_id, "text": DOCS[doc_id], "score": float(score)} for score, doc_id in scored[:top_k]]
    best = contexts[0]["text"] if contexts and contexts[0]["score"] > 1 else ""
    text = best.split(". ")[0].rstrip(".") + "." if best else "I don't know."
    return {"answer": text, "contexts": contexts}
