"""python -m ragexp.monitor: feedback on a 1-5 scale (monitor.feedback_satisfied_from), and a bug in
the sample's judge ends the command with exit status 1 and its traceback (not a failed record)."""
import json

from conftest import call_in
from ragexp.judges.offline import OfflineJudge
from ragexp.monitor.synthetic import generate


class JudgeWithABug(OfflineJudge):
    def judge(self, question, hits, answer):
        return {}["missing"]


def monitor_cli(tmp_path, log, *overrides):
    from ragexp.monitor.__main__ import main

    return call_in(main, ["ragexp.monitor", f"monitor.input={log}", "tracker=none", "embedder@scoring_embedder=hash",
                          f"cache.dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'out'}", *overrides], tmp_path)


def test_ratings_from_1_to_5_count_as_satisfied_from_the_configured_score(tmp_path):
    log = tmp_path / "log.jsonl"
    ratings = [5, 4, 3, 2, 1, 4, None, 5]
    log.write_text("".join(json.dumps({"timestamp": f"2026-11-01T0{n}:00:00Z", "latency_ms": 100, "feedback": r}) + "\n"
                           for n, r in enumerate(ratings)))
    proc = monitor_cli(tmp_path, log, "monitor.judge_sample=0", "monitor.feedback_satisfied_from=4")
    assert proc.returncode == 0, proc.stderr
    [window] = json.loads((tmp_path / "out" / "windows.json").read_text())["windows"]
    assert window["metrics"]["feedback_count"] == 7 and window["metrics"]["satisfaction_rate"] == round(4 / 7, 6)
    bad = monitor_cli(tmp_path, log, "monitor.judge_sample=0", "monitor.feedback_satisfied_from=high")
    assert bad.returncode == 2 and "monitor.feedback_satisfied_from: 'high' is not a number" in bad.stderr


def test_a_bug_in_the_judge_ends_the_monitor_with_1(tmp_path):
    log = generate(tmp_path / "log.jsonl", 20, span="1d")
    proc = monitor_cli(tmp_path, log, "monitor.judge_sample=2", f"judge._target_={__name__}.JudgeWithABug")
    assert proc.returncode == 1 and "KeyError: 'missing'" in proc.stderr and "Traceback" in proc.stderr
