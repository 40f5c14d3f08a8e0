"""Sentence splitting in any script (ragexp.base.text): Latin punctuation before a sentence start, CJK
end marks with no space after them, and the end marks of scripts without capital letters; the
sentence chunker and the extractive generator get the same sentences."""
import pytest

from ragexp.components.chunkers import SentenceChunker
from ragexp.base.text import sentence_spans, split_sentences
from ragexp.types import Document

CASES = {
    "english": ("The port is 7400. It listens on eth0! Use e.g. the CLI. Version v1.2 of it. Ready?",
                ["The port is 7400.", "It listens on eth0!", "Use e.g. the CLI.", "Version v1.2 of it.", "Ready?"]),
    "japanese": ("東京は日本の首都です。人口は約1400万人です！本当ですか？はい。",
                 ["東京は日本の首都です。", "人口は約1400万人です！", "本当ですか？", "はい。"]),
    "chinese": ("北京是中国的首都。它有很多人口！你去过吗？",
                ["北京是中国的首都。", "它有很多人口！", "你去过吗？"]),
    "hindi (no capitals)": ("दिल्ली भारत की राजधानी है। यह एक बड़ा शहर है। क्या यह सच है? हाँ।",
                            ["दिल्ली भारत की राजधानी है।", "यह एक बड़ा शहर है।", "क्या यह सच है?", "हाँ।"]),
    "arabic (no capitals)": ("القاهرة عاصمة مصر. إنها مدينة كبيرة؟ نعم.",
                             ["القاهرة عاصمة مصر.", "إنها مدينة كبيرة؟", "نعم."]),
    "greek": ("Η Αθήνα είναι πρωτεύουσα. Έχει πολλά μουσεία.", ["Η Αθήνα είναι πρωτεύουσα.", "Έχει πολλά μουσεία."]),
}


@pytest.mark.parametrize("text,expected", CASES.values(), ids=CASES.keys())
def test_sentences_in_any_script(text, expected):
    assert split_sentences(text) == expected
    assert [text[a:b] for a, b in sentence_spans(text)] == expected  # spans point into the text


def test_a_lower_case_word_after_a_full_stop_continues_the_sentence():
    assert split_sentences("See fig. three and v2. then go on. Next.") == ["See fig. three and v2. then go on.", "Next."]


def test_the_sentence_chunker_packs_cjk_sentences_whole():
    text, sentences = CASES["japanese"]
    chunks = SentenceChunker(chunk_size=25, chunk_overlap=0).chunk([Document("jp", text)])
    assert [c.text for c in chunks] == ["東京は日本の首都です。人口は約1400万人です！", "本当ですか？はい。"]
    assert "".join(c.text for c in chunks) == "".join(sentences)
