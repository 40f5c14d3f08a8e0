"""Talking to OpenAI-compatible chat endpoints (OpenAI, Azure-style proxies, vLLM, Ollama, llama.cpp).

- `endpoint.Endpoint`: where a component's endpoint is and how hard to push it (YAML `endpoint:`);
- `client.ChatClient`: one endpoint shared by the threads of a run: cache, budget, concurrency
  and rate limits, retries with backoff;
- `cache.ResponseCache`: every request and its reply on disk (sqlite, safe for several processes);
- `usage.Usage`, `usage.Prices`: tokens, cost, request counts and the budget of a run;
- `session.LLMSession`: the `llm` config node; connects the LLM components of a run;
- `replies`: reading JSON replies tolerantly; `prompts`: templates with named fields;
- `estimate`: what a `dry_run=true` prints.

No module here imports `openai` at import time: `python -m ragexp --help` stays light."""
