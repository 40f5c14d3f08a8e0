"""The words a leaderboard and a regression check decide with, each said once: the report's method
note (ragexp.compare.report) and `python -m ragexp --help` (ragexp.config.docs) print these, and the
glossary gives them (a test holds the three to the same text)."""
from __future__ import annotations

VERDICTS = {
    "best": "the configuration with the best objective; every other is compared with it, paired on the "
            "questions both judged",
    "≈ best": "not significantly different from the best: the Holm-corrected test does not reject and the "
              "difference's interval holds 0 (a tie, as far as these questions can tell)",
    "worse before Holm": "the difference's interval excludes 0, but the test does not reject once corrected "
                         "for the other comparisons (Holm): worse on its own, not shown to be among so many comparisons",
    "worse": "significantly worse than the best after Holm's correction",
    "not tested": "no paired test: the runs share no judged question, or compute the objective differently",
    "detects": "the difference from the best that a comparison of those questions detects with 80% power "
               "(two-sided, from its interval's width): a row ≈ best says nothing of smaller differences",
    "too few questions to tell": "a regression check (gate.baseline, assert_no_regression) whose questions "
                                 "detect only drops above a tenth of the metric's scale, with no margin given: "
                                 "it fails, unless accepted (accept_low_power)",
}

