"""Rubric judges: criteria of a team's own, as config (`conf/rubric/`). `Rubric` is the `rubric`
node, `RubricJudge` judges with it (judge=rubric, or beside another judge); `criteria` holds what
one criterion is, `scales` its scale, `asking` the prompt and the reading of the reply."""
from ragexp.judges.rubric.judge import Rubric, RubricJudge

__all__ = ["Rubric", "RubricJudge"]
