"""Each chunker on small real text, with the chunks checked against the text they came from."""
import pytest
import yaml
from hydra.utils import get_class

from conftest import CONF, options
from ragexp.components.chunkers import (FixedChunker, RecursiveChunker, SentenceChunker,
                             pack)
from ragexp.types import Document
from ragexp.config.build import from_yaml

PROSE = Document("prose", (
    "Quarry stores jobs in queues. Each queue has a name and a priority. "
    "Workers poll the server for work every two seconds. A job that fails is retried three times.\n\n"
    "The dead-letter queue keeps jobs that failed too often. Operators can inspect it with the CLI. "
    "Jobs in the dead-letter queue expire after seven days."
))

MARKDOWN = Document("guide", (
    "# Install\n\nDownload the binary and put it on your PATH. Check it with `qry version`.\n\n"
    "## Linux\n\nUse the tarball. Extract it into /usr/local/bin.\n\n"
    "## macOS\n\nUse Homebrew: brew install quarry.\n\n"
    "# Configure\n\nEdit quarry.yaml. The default port is 7400.\n"
))


def assert_chunks_are_slices(chunks, doc):
    assert chunks
    for c in chunks:
        assert c.doc_id == doc.doc_id
        assert doc.text[c.start : c.end] == c.text
    assert len({c.chunk_id for c in chunks}) == len(chunks)


def test_fixed_windows_have_the_size_and_overlap():
    chunks = FixedChunker(chunk_size=100, chunk_overlap=20).chunk([PROSE])
    assert_chunks_are_slices(chunks, PROSE)
    assert all(len(c.text) <= 100 for c in chunks)
    assert len(chunks[0].text) == 100
    assert chunks[1].start == 80  # 100 - 20 overlap
    assert chunks[-1].end == len(PROSE.text)


def test_recursive_prefers_paragraph_breaks():
    chunks = RecursiveChunker(chunk_size=200, chunk_overlap=0).chunk([PROSE])
    assert_chunks_are_slices(chunks, PROSE)
    assert all(len(c.text) <= 200 for c in chunks)
    first_paragraph_end = PROSE.text.index("\n\n")
    assert any(c.end == first_paragraph_end for c in chunks)


def test_sentence_chunks_hold_whole_sentences_with_overlap():
    chunks = SentenceChunker(chunk_size=130, chunk_overlap=60).chunk([PROSE])
    assert_chunks_are_slices(chunks, PROSE)
    for c in chunks:
        assert c.text[0].isupper() and c.text.endswith(".")
    assert chunks[1].start < chunks[0].end  # overlap repeats the last sentence
    covered = set()
    for c in chunks:
        covered.update(range(c.start, c.end))
    assert all(i in covered for i, ch in enumerate(PROSE.text) if not ch.isspace())


def test_markdown_chunks_never_cross_a_section():
    chunks = from_yaml("chunker/markdown", chunk_size=500, chunk_overlap=0).chunk([MARKDOWN])
    assert_chunks_are_slices(chunks, MARKDOWN)
    assert [c.text.splitlines()[0] for c in chunks] == ["# Install", "## Linux", "## macOS", "# Configure"]
    assert "7400" in chunks[-1].text and "brew" not in chunks[-1].text


def test_token_windows_count_tokens_of_the_on_disk_tokenizer():
    from tokenizers import Tokenizer

    from ragexp.components.chunkers import minilm_tokenizer_file

    tokenizer = Tokenizer.from_file(minilm_tokenizer_file())
    tokenizer.no_truncation()
    tokenizer.no_padding()
    chunks = from_yaml("chunker/token", chunk_size=20, chunk_overlap=5).chunk([PROSE])
    assert_chunks_are_slices(chunks, PROSE)
    counts = [len(tokenizer.encode(c.text, add_special_tokens=False).ids) for c in chunks]
    assert all(n <= 20 for n in counts[:-1]) and counts[0] == 20
    total = len(tokenizer.encode(PROSE.text, add_special_tokens=False).ids)
    assert len(chunks) == -(-(total - 5) // 15)  # windows of 20 stepping by 15


def test_semantic_breaks_where_the_topic_changes(minilm):
    doc = Document("mixed", (
        "Bake the bread at 220 degrees for forty minutes. Let the dough rise for two hours before baking. "
        "Knead the flour, water, yeast and salt into a smooth dough. Brush the loaf with egg for a golden crust. "
        "The TCP handshake exchanges SYN and ACK packets. A router forwards packets between networks. "
        "Packet loss makes TCP retransmit segments. Network latency is measured in milliseconds."
    ))
    chunks = from_yaml("chunker/semantic", embedder=minilm, breakpoint_percentile=80).chunk([doc])
    assert_chunks_are_slices(chunks, doc)
    assert len(chunks) >= 2
    boundary = doc.text.index("The TCP")
    assert boundary in {c.start for c in chunks}
    for c in chunks:  # no chunk mixes baking and networking
        assert not ("dough" in c.text and "packet" in c.text.lower())


def test_pack_steps_forward_even_when_a_unit_is_longer_than_the_chunk():
    assert pack([(0, 10), (11, 300), (301, 310)], chunk_size=50, chunk_overlap=20) == [(0, 10), (11, 300), (301, 310)]


def chunker_yaml(option: str) -> dict:
    return yaml.safe_load((CONF / "chunker" / f"{option}.yaml").read_text())


@pytest.mark.parametrize("option", [o for o in options("chunker") if "chunk_overlap" in chunker_yaml(o)])
def test_overlap_must_be_smaller_than_the_chunk(option):
    cls = get_class(chunker_yaml(option)["_target_"])
    assert cls.constraints(chunk_size=100, chunk_overlap=100) == ["chunk_overlap: must be less than chunk_size (100), got 100"]
    assert cls.constraints(chunk_size=100, chunk_overlap=99) == []
