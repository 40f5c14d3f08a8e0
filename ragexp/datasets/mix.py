"""`dataset=mix`: a golden set and a synthetic set combined in a set ratio."""
from __future__ import annotations

import math
import random
from dataclasses import replace

from ragexp.datasets import Loader, Rows
from ragexp.errors import RagexpError
from ragexp.types import Dataset, Document
from ragexp.base.settings import OnError


class MixDataset(Loader):
    """`synthetic_share` of the questions from `synthetic`, the rest from `golden` (two loaders).
    With `size: null`, as many questions as the ratio allows with every question of the scarcer
    set; questions are drawn at random (`seed`) and keep their order within each set. Each keeps
    its `source` ("golden" when its loader did not say) and gets it as an id prefix
    ("golden:q001"); the corpus is both sets' documents (a document id in both must have the same text)."""

    def __init__(self, golden: Loader, synthetic: Loader, synthetic_share: float, size: int | None,
                 seed: int, limit: int | None, name: str, on_error: OnError,
                 qrels: str | None):
        super().__init__(None, limit, name, on_error, qrels)
        if isinstance(synthetic_share, bool) or not isinstance(synthetic_share, (int, float)) or not 0 <= synthetic_share <= 1:
            raise RagexpError(f"dataset.synthetic_share must be between 0 and 1, got {synthetic_share!r}")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise RagexpError(f"dataset.size must be a positive integer or null, got {size!r}")
        self.golden, self.synthetic, self.share, self.size, self.seed = golden, synthetic, synthetic_share, size, seed

    def split(self, golden: int, synthetic: int) -> tuple[int, int]:
        """(golden, synthetic) question counts in the ratio, within what each set has."""
        if self.size is not None:
            total = self.size
        elif self.share == 1:
            total = synthetic
        elif self.share == 0:
            total = golden
        else:
            total = min(math.floor(synthetic / self.share + 1e-9), math.floor(golden / (1 - self.share) + 1e-9))
        n_synthetic = round(total * self.share)
        n_golden = total - n_synthetic
        if n_synthetic > synthetic or n_golden > golden:
            raise RagexpError(f"dataset.size={total} at synthetic_share={self.share:g} needs {n_synthetic} synthetic and "
                              f"{n_golden} golden questions; the sets have {synthetic} and {golden} "
                              "(lower dataset.size, or null for as many as the ratio allows)")
        return n_golden, n_synthetic

    def read(self, rows: Rows) -> Dataset:
        sets = {"golden": self.golden.load(), "synthetic": self.synthetic.load()}
        n_golden, n_synthetic = self.split(len(sets["golden"].questions), len(sets["synthetic"].questions))
        rng = random.Random(self.seed)
        questions = []
        for source, n in (("golden", n_golden), ("synthetic", n_synthetic)):
            pool = sets[source].questions
            for index in sorted(rng.sample(range(len(pool)), n)):
                q = pool[index]
                questions.append(replace(q, qid=f"{q.source or source}:{q.qid}", source=q.source or source))
        documents: dict[str, Document] = {}
        for source, dataset in sets.items():
            for doc in dataset.documents:
                known = documents.setdefault(doc.doc_id, doc)
                if known.text != doc.text:
                    raise RagexpError(f"dataset.{source}: document {doc.doc_id!r} differs from the other set's document "
                                      "of that id; mix sets made from the same corpus")
        notes = (f"mix: {n_synthetic} synthetic + {n_golden} golden questions "
                 f"(synthetic_share={self.share:g}, of {len(sets['synthetic'].questions)} and {len(sets['golden'].questions)})",)
        return Dataset(self.name, tuple(documents.values()), tuple(questions[: self.limit] if self.limit else questions),
                       skipped_documents=tuple(d for s in sets.values() for d in s.skipped_documents),
                       skipped_rows=tuple(r for s in sets.values() for r in s.skipped_rows),
                       notes=(*notes, *(n for s in sets.values() for n in s.notes)))
