"""`judge=mlflow`: MLflow's own judges (scorers) as ragexp's judge, so that a team's MLflow judges
run over ragexp's sweeps, with its stage cache, leaderboard, gate and calibration.

`judge.scorers` lists them: the name of a built-in MLflow scorer that reads the question, the answer
and, for some, the expected answer (`RelevanceToQuery`, `Correctness`, `Safety`, `Completeness`,
`Fluency`, `Equivalence`, `Summarization`, ...), or a judge of your own as `{name, instructions}`
(MLflow's `make_judge`; its instructions use `{{ inputs }}`, `{{ outputs }}` and
`{{ expectations }}`; add `guidelines: [...]` instead of `instructions` for MLflow's `Guidelines`).
Each becomes a metric named after the scorer, on 0-1: a yes/pass verdict is 1, a no/fail 0, and
the scorer's rationale is the question's reasoning. `inputs` holds the question and the retrieved
context (`{"question": ..., "context": [...]}`), `outputs` the answer, `expectations` the expected
answer (`expected_response`); a scorer that reads a trace (`RetrievalGroundedness`, ...) has none
here and is refused before any work.

Their requests go to `judge.endpoint` through MLflow's own OpenAI provider (model
`openai:/<judge.endpoint.model>`; the endpoint's base URL and key are given to MLflow through
`OPENAI_API_BASE` and `OPENAI_API_KEY` while the judge's calls are under way), not through ragexp's LLM session: they are
cached by the stage cache as every judgement is, but not counted in `llm_*` metrics, not priced and
not bounded by `budget_usd`, and a dry run cannot estimate them (refused). A model file ragexp serves
(`endpoint@judge.endpoint=local judge.endpoint.model_path=FILE`) is started at the judge's first call."""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

from ragexp.errors import QuestionFailed, RagexpError
from ragexp.judges.contract import Judge
from ragexp.types import Answer, Hit, Judgement, Question

YES, NO = ("yes", "pass", "true"), ("no", "fail", "false")
ENVIRONMENT = ("OPENAI_API_BASE", "OPENAI_API_KEY")  # what MLflow's OpenAI provider reads
EXPECTING = ("Correctness", "Equivalence", "ExpectationsGuidelines")  # built-ins that read the expected answer
GROUNDING = ("RetrievalGroundedness", "RetrievalRelevance", "RetrievalSufficiency")  # built-ins that read the contexts
SETTING = "judge.scorers"


class MlflowScorersJudge(Judge):
    """MLflow scorers, each a metric on 0-1 (yes = 1); overall_score is their mean (weights=judge)."""

    kind = "mlflow"
    flags_hallucination = False
    weights_on_unit_scale = True
    untargeted = ("overall_score",)
    scorecard: dict[str, str] = {}
    estimable = False  # its requests go through MLflow: a dry run cannot count them

    def __init__(self, scorers: Sequence[Any], endpoint: Any, name: str | None):
        if not scorers:
            raise RagexpError(f"{SETTING}: empty; name MLflow scorers, e.g. {SETTING}=[RelevanceToQuery,Safety]")
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(scorers, (ListConfig, DictConfig)):  # as Hydra passes them: plain lists and dicts
            scorers = OmegaConf.to_container(scorers, resolve=True)  # type: ignore[assignment]
        self.endpoint = endpoint
        self.model = f"openai:/{endpoint.model}"
        self.scorers = [scorer_of(spec, i, self.model) for i, spec in enumerate(scorers)]
        names = [s.name for s in self.scorers]
        if len(set(names)) != len(names):
            raise RagexpError(f"{SETTING}: two scorers are named {sorted({n for n in names if names.count(n) > 1})[0]!r}; "
                              "give one a name of its own")
        self.name = name or f"mlflow-{endpoint.model}"
        self.metrics = tuple(names)
        self.scales = {n: (0.0, 1.0) for n in names}
        self.weights = {n: 1 / len(names) for n in names}
        self.needs_reference = tuple(s.name for s in self.scorers if reads_expectations(s))
        self.needs_contexts = tuple(s.name for s in self.scorers if type(s).__name__ in GROUNDING)
        self._lock = threading.Lock()
        self._inside = 0  # calls under way
        self._saved: dict[str, str | None] = {}  # the environment before the first
        self._served = False  # a model file ragexp serves (endpoint=local with model_path): started at the first call

    @staticmethod
    def configured_scales(node: dict) -> dict[str, tuple[float, float]]:
        """The metrics and scales a run's `judge` settings give (for calibrate and compare --labels,
        which read a logged run's config): each scorer named in `scorers`, on 0-1."""
        specs = node.get("scorers") or []
        return {scorer_of(spec, i, "openai:/model").name: (0.0, 1.0) for i, spec in enumerate(specs)}

    @property
    def concurrency(self) -> int:
        return int(self.endpoint.max_concurrency)

    @contextmanager
    def pointed(self) -> Iterator[None]:
        """MLflow's OpenAI provider reads its base URL and key from the environment: they are set
        while any of this judge's calls is under way, and put back as they were after the last."""
        with self._lock:
            if not self._inside:
                if getattr(self.endpoint, "model_path", None) is not None and not self._served:
                    self.endpoint.probe(getattr(self, "config_key", None) or "judge.endpoint")  # its server started
                    self._served = True
                self._saved = {k: os.environ.get(k) for k in ENVIRONMENT}
                key_env = self.endpoint.api_key_env
                os.environ["OPENAI_API_BASE"] = str(self.endpoint.base_url)
                os.environ["OPENAI_API_KEY"] = (os.environ.get(key_env) or "") if key_env else "no-key"
            self._inside += 1
        try:
            yield
        finally:
            with self._lock:
                self._inside -= 1
                if not self._inside:
                    for name, value in self._saved.items():
                        if value is None:
                            os.environ.pop(name, None)
                        else:
                            os.environ[name] = value

    def judge(self, question: Question, hits: Sequence[Hit], answer: Answer) -> Judgement:
        from mlflow.exceptions import MlflowException

        data = {"inputs": {"question": question.text, "context": [h.chunk.text for h in hits]},
                "outputs": answer.text}
        if question.answers:
            data["expectations"] = {"expected_response": question.expected}
        scores, reasons = {}, []
        for scorer in self.scorers:
            if scorer.name in self.needs_reference and not question.answers:
                continue
            try:
                with self.pointed():
                    feedback = scorer(**{k: v for k, v in data.items() if k in accepted(scorer)})
            except (MlflowException, OSError, ValueError) as err:  # a failed request or an unreadable reply; others are bugs
                raise QuestionFailed(f"MLflow scorer {scorer.name}: {type(err).__name__}: "
                                     f"{str(err).splitlines()[0][:300] if str(err) else ''}") from None
            if getattr(feedback, "error", None) is not None:
                raise QuestionFailed(f"MLflow scorer {scorer.name}: {feedback.error.error_message or feedback.error}")
            scores[scorer.name] = value_of(feedback.value, scorer.name)
            if feedback.rationale:
                reasons.append(f"{scorer.name}: {feedback.rationale}")
        return Judgement(self.name, scores, None, " | ".join(reasons))


def accepted(scorer) -> set[str]:
    """The keyword arguments of the scorer's call among inputs, outputs and expectations."""
    import inspect

    return set(inspect.signature(scorer.__call__).parameters) & {"inputs", "outputs", "expectations"}


def reads_expectations(scorer) -> bool:
    return type(scorer).__name__ in EXPECTING or "expectations" in columns_of(scorer) and \
        "expectations" in accepted(scorer)


def columns_of(scorer) -> set[str]:
    """What a scorer reads (inputs, outputs, expectations, trace); empty: it does not say."""
    required = getattr(scorer, "required_columns", None) or set()
    if not required and getattr(scorer, "instructions", None):  # a make_judge judge: the template's fields
        text = str(scorer.instructions)
        required = {f for f in ("inputs", "outputs", "expectations", "trace") if "{{ " + f in text or "{{" + f in text}
    return set(required)


def scorer_of(spec: Any, index: int, model: str):
    """One entry of judge.scorers as an MLflow scorer (refused with the setting to fix)."""
    import mlflow.genai.scorers as builtin
    from mlflow.genai.judges import make_judge

    setting = f"{SETTING}[{index}]"
    if isinstance(spec, str) and ":" in spec:  # module:Class, e.g. a third-party scorer MLflow wraps
        import importlib

        module, _, attribute = spec.partition(":")
        try:
            cls = getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError) as err:
            raise RagexpError(f"{setting}: {spec!r} cannot be imported ({type(err).__name__}: "
                              f"{str(err).splitlines()[0][:200]}); is its package installed?") from None
        scorer = made(cls, spec, setting, model)
    elif isinstance(spec, str):
        cls = getattr(builtin, spec, None)
        known = sorted(n for n in dir(builtin) if n[:1].isupper() and isinstance(getattr(builtin, n), type)
                       and not n.startswith(("Conversation", "Scorer", "Tool")))
        if cls is None or not isinstance(cls, type) or spec in ("Scorer", "ScorerSamplingConfig"):
            raise RagexpError(f"{setting}: {spec!r} is not an MLflow scorer; built-in ones: {', '.join(known)}; or "
                              "give {name: ..., instructions: ...} for a judge of your own")
        scorer = made(cls, spec, setting, model)
    elif isinstance(spec, dict) and spec.get("name") and (spec.get("instructions") or spec.get("guidelines")):
        unknown = set(spec) - {"name", "instructions", "guidelines"}
        if unknown:
            raise RagexpError(f"{setting}: unknown key(s) {', '.join(sorted(unknown))}; a scorer of your own takes "
                              "name and instructions (or guidelines)")
        if spec.get("guidelines"):
            guidelines = spec["guidelines"]
            scorer = builtin.Guidelines(name=str(spec["name"]), model=model,
                                        guidelines=[guidelines] if isinstance(guidelines, str) else list(guidelines))
        else:
            try:
                scorer = make_judge(name=str(spec["name"]), instructions=str(spec["instructions"]), model=model,
                                    feedback_value_type=bool)
            except Exception as err:  # noqa: BLE001 - MLflow's check of the instructions' template
                raise RagexpError(f"{setting}.instructions: {str(err).splitlines()[0][:300]}") from None
    else:
        raise RagexpError(f"{setting}: {spec!r}: give a built-in MLflow scorer's name (RelevanceToQuery, ...) or "
                          "{name: ..., instructions: ...} (MLflow's make_judge), or {name: ..., guidelines: [...]}")
    if "trace" in columns_of(scorer):
        raise RagexpError(f"{setting}: MLflow's {scorer.name} reads a trace, which a ragexp judgement does not have; "
                          "choose a scorer that reads inputs, outputs and expectations")
    return scorer


def made(cls: Any, spec: str, setting: str, model: str):
    """A scorer class made with its defaults and the judge's model."""
    try:
        return cls(model=model) if "model" in getattr(cls, "model_fields", {}) else cls()
    except Exception as err:  # noqa: BLE001 - a scorer that needs settings (Guidelines needs its guidelines)
        raise RagexpError(f"{setting}: MLflow's {spec} cannot be made with defaults "
                          f"({str(err).splitlines()[0][:200]}); give it as a mapping with its settings") from None


def value_of(value: Any, name: str) -> float:
    """A scorer's verdict on 0-1: yes/pass/true 1, no/fail/false 0, a number in [0, 1] as it is."""
    text = str(getattr(value, "value", value)).strip().lower()
    if isinstance(value, bool):
        return float(value)
    if text in YES:
        return 1.0
    if text in NO:
        return 0.0
    try:
        number = float(text)
    except ValueError:
        raise QuestionFailed(f"MLflow scorer {name} gave {value!r}, which is not yes/no or a number in 0-1") from None
    if not 0 <= number <= 1:
        raise QuestionFailed(f"MLflow scorer {name} gave {number:g}, outside 0-1 (ragexp reads a scorer on 0-1)")
    return number
