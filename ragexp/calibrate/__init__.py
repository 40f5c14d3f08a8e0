"""`python -m ragexp.calibrate`: does the judge agree with people?

- `source`: the judged run (an MLflow run id, or a run folder) as a per-question table, with the
  judge's name and each metric's scale;
- `labels`: human labels (CSV or JSONL, long or wide, one or several annotators) read and checked
  against the run, and the annotation sheet `--export N` writes (a stratified sample);
- `agreement`: judge vs people per metric (Spearman, Kendall, quadratic-weighted kappa, MAE, bias,
  bootstrap CIs) and people vs people (Krippendorff's alpha, pairwise kappa: the ceiling);
- `__main__`: the command, its report, confusion plots and the MLflow run linked to the judged run.
"""
