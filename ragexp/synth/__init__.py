"""`python -m ragexp.synth`: a synthetic test set from any corpus (docs/how-to/synthetic.md).

- `sources`: chunks sampled stratified by document and section, multi-hop pairs by embedding neighbourhood;
- `cloze`: the offline generator (`synth/generator=cloze`): questions from the corpus's own sentences;
- `llm`: the LLM generator (`synth/generator=llm`) and its grounding verdict;
- `quality`: the rules a candidate must pass, each counted with its rejections;
- `build`: the generation loop; `output`: the dataset folder; `tracking`: the MLflow run; `app`: the job."""

TYPES = ("factual", "procedural", "comparative", "troubleshooting", "multi_hop")
