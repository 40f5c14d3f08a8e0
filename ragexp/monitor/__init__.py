"""`python -m ragexp.monitor`: the online half. Production interaction logs (JSONL or CSV) are
streamed (records), grouped into time windows and summarised (windows, percentiles), a seeded
sample per window judged by the judge group (judging), logged to MLflow (tracking), checked
against a baseline run (alerts) and reported (report); `synthetic` writes test logs."""
