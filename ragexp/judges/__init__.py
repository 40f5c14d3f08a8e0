"""Judges: score one question's context and answer. `contract.Judge` is what every judge provides;
`llm_base.LLMJudgeBase` what the LLM judges share. One class per `judge` option:

- `offline.OfflineJudge` (judge=offline): the single-call metrics by the words an answer shares with its context, no LLM;
- `llm.LLMJudge` (judge=llm, gpt-4o-mini, local): the specification's single-call LLM judge;
- `triad.TriadJudge` (judge=triad): the RAG triad (sentence extraction, claims, answer relevance)."""
from ragexp.judges.contract import Judge
from ragexp.judges.offline import OfflineJudge, to_scale

__all__ = ["Judge", "OfflineJudge", "to_scale"]
