"""The log-probability bench (bench/judge_logprobs.py, `python bench/judge_agreement.py logprobs`):
its order of items, its journal (a stopped run goes on where it stopped, nothing judged twice), and
its figures read from a judge's real request path, against the scripted server whose replies carry
token log-probabilities (the test model itself is the bench's, not a test's)."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))
import judge_agreement as ja  # noqa: E402
import judge_logprobs as jl  # noqa: E402
from openai_server import OpenAIServer, auto_reply, char_logprobs, judge_json, prompt_text, task  # noqa: E402

UNREADABLE = "never readable"


def item(set_name: str, n: int, supported: bool = True, answer: str | None = None) -> ja.Item:
    return ja.Item(set_name, f"{set_name}-{n}", f"g{n}", "Summarise the document.", (f"Document {n} of {set_name}.",),
                   answer or f"Answer {n} of {set_name}.", supported)


def test_items_go_in_turns_each_set_in_the_order_capped_takes_them():
    parts = {"a": [item("a", n) for n in range(5)], "b": [item("b", n) for n in range(2)]}
    for items in parts.values():
        for n in range(len(items)):
            assert jl.in_order(items)[:n] == ja.capped(items, n)
    turns = jl.in_turns(parts)
    assert [i.set for i in turns] == ["a", "b", "a", "b", "a", "a", "a"]
    assert [i for i in turns if i.set == "a"] == jl.in_order(parts["a"])


def test_the_figures_report_the_same_count_of_every_set_but_one_judged_whole():
    parts = {"a": [item("a", n) for n in range(6)], "b": [item("b", n) for n in range(2)],
             "c": [item("c", n) for n in range(6)]}
    done = {(i.set, i.id): {} for i in jl.in_order(parts["a"])[:4] + parts["b"] + jl.in_order(parts["c"])[:3]}
    done[(jl.in_order(parts["c"])[4].set, jl.in_order(parts["c"])[4].id)] = {}  # after a gap: not counted
    got = jl.first_done(parts, done)
    assert {name: len(items) for name, items in got.items()} == {"a": 3, "b": 2, "c": 3}
    assert got["a"] == jl.in_order(parts["a"])[:3]


def scripted(items):
    """The scripted server: the single-call judge's reply writes faithfulness 5 with the probability
    split between 5 and 9 (a supported answer: 7 weighted) or 5 and 1 (3 weighted); the reply to the
    answer UNREADABLE is never JSON."""
    by_answer = {i.answer: i for i in items}

    def chat(body: dict):
        if task(body) != "judge":
            return auto_reply(body)
        text = prompt_text(body)
        [found] = [i for answer, i in by_answer.items() if answer in text]
        if found.answer == UNREADABLE:
            return "no JSON here"
        content = judge_json(faithfulness=5, hallucination=not found.supported)
        at = content.index('"faithfulness": ') + len('"faithfulness": ')
        other = "9" if found.supported else "1"
        return {"content": content, "logprobs": char_logprobs(content, {at: {"5": 0.5, other: 0.5}})}

    return OpenAIServer(chat=chat)


def scripted_judge(server, cache: Path):
    judge = ja.compose_judge("llm")
    cfg, build = ja.composed("judge=llm")
    judge.endpoint = build(cfg.judge.endpoint, base_url=server.base_url, model="gpt-4o-mini", api_key_env=None,
                           backoff_s=0.01)
    judge.logprobs = True
    session = build(cfg.llm, cache_dir=str(cache))
    session.connect(judge=judge)
    return judge


def test_a_stopped_run_goes_on_from_its_journal_and_the_figures_read_weighted_and_sampled_scores(tmp_path):
    items = [item("s", n, supported=n % 2 == 0) for n in range(8)] + [item("s", 8, False, UNREADABLE)]
    parts = {"s": items}
    made = []

    with scripted(items) as server:
        def judge_of():
            made.append(1)
            return scripted_judge(server, tmp_path / "llm")

        assert jl.judge_parts(parts, judge_of, tmp_path, until=0.0) == {} and not made  # stopped before the first
        first = {"s": ja.capped(items, 4)}
        assert len(jl.judge_parts(first, judge_of, tmp_path)) == 4
        asked = len(server.chat_requests())
        done = jl.judge_parts(parts, judge_of, tmp_path)
        assert len(done) == 9 and len(made) == 2
        left = [i for i in items if i not in first["s"]]
        reasked = sum(i.answer == UNREADABLE for i in left)  # the unreadable reply is asked again once
        assert len(server.chat_requests()) - asked == len(left) + reasked
        assert jl.judge_parts(parts, lambda: pytest.fail("nothing is left to judge"), tmp_path) == done

    lines = [json.loads(line) for line in (tmp_path / jl.JOURNAL).read_text().splitlines()]
    assert sorted(r["id"] for r in lines) == sorted(i.id for i in items)  # each item once
    [failed] = [r for r in lines if "failed" in r]
    assert failed["id"] == "s-8" and failed["failed"]
    ok = next(r for r in lines if r["id"] == "s-0")
    assert ok["sampled"] == 5 and ok["score"] == pytest.approx(7) and ok["weighted"] is True
    assert ok["hallucination_sampled"] is False and ok["wall_s"] >= 0

    got = jl.set_figures(jl.in_order(items), done)
    assert (got["items"], got["judged"], got["failed"], got["supported"], got["weighted_read"]) == (9, 8, 1, 4, 8)
    assert got["roc_auc"]["weighted"] == 1.0 and got["roc_auc"]["sampled"] == 0.5  # the written 5s all tie
    assert got["weighted_minus_sampled"]["difference"] == 0.5
    assert got["distinct_scores"] == {"weighted": 2, "sampled": 1}
    assert got["roc_auc_no_hallucination"] == {"weighted": 1.0, "sampled": 1.0}  # written as the label, certain
    assert list(got["failures"].values()) == [1]


def test_measure_reports_every_set_and_says_which_cannot_be_read(tmp_path):
    """Without snapshots, faithbench comes from the shipped copy; the other sets are missing with
    where to get them, and the figures are of the same items as `--limit`."""
    shipped = ja.load_set("faithbench", tmp_path / "none")
    if shipped is None:
        pytest.skip("bench/data/judge_agreement/faithbench.jsonl is not in this checkout")
    chosen = ja.capped([i for i in shipped if i.part == "heldout"], 4)
    with scripted(chosen) as server:
        found = jl.measure(tmp_path / "none", tmp_path / "work", limit=4,
                           judge_of=lambda: scripted_judge(server, tmp_path / "llm"))
    assert all("missing" in found["sets"][name] for name in ("lfqa", "qags_cnndm", "qags_xsum"))
    faithbench = found["sets"]["faithbench"]
    assert faithbench["items"] == 4 == faithbench["judged"] and found["per_set"] == 4 and found["subsample"]
    assert faithbench["heldout"] == sum(i.part == "heldout" for i in shipped)
    assert "| faithbench | 4 of" in jl.markdown(found)
