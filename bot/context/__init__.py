"""What the model is sent, measured: the token estimate, the budget, and the per-turn plan.

Modules:

- `tokenizer`: `OfflineTokenizers`, exact counts where a model's tokenizer is on the machine already
  (never downloaded).
- `estimator`: `TokenEstimator`, characters per token calibrated per model by reported usage, or the
  exact counts above; the one way the bot counts tokens.
- `budget`: `ContextBudget`, the compaction threshold for a model and each prompt part's share of it;
  `fit_prompt_parts` cuts a part that overflows its share, visibly.
- `plan`: `ContextPlan`, a session's prompt against the budget, part by part.

This package reads plain data (the domain, the model limits, the settings) and nothing else: the
compaction, memory, RAG, the pipeline and the commands build on it, never the other way round.
"""
