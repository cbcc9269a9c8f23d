"""What the model is sent, measured: the token estimate, the budget, and the per-turn plan.

Modules:

- `tokenizer`: `OfflineTokenizers`, exact counts where a model's tokenizer is on the machine already
  (never downloaded).
- `estimator`: `TokenEstimator`, characters per token calibrated per model by reported usage, or the
  exact counts above; the one way the bot counts tokens.
- `budget`: `ContextBudget`, the compaction threshold for a model and each prompt part's share of it.
- `plan`: `ContextPlan`, a turn's request against the budget, part by part: what each part (persona
  and instructions, MEMORY.md, the memory pack, the daily notes, RAG, the summary, the history, the
  tool schemas) is given and what it really takes, the room the conversation has, the reply reserve;
  which part each section of the system prompt (`PromptSection`) counts in, and `fit_prompt_parts`,
  which cuts a section that overflows its share, visibly.
- `planner`: `ContextPlanner`, the one place plans are made: compaction's trigger, the memory and RAG
  shares, context building's fitting, `/status` and `/context` all ask it.

This package reads plain data (the domain, the model limits, the settings) and nothing else: the
compaction, memory, RAG, the pipeline and the commands build on it, never the other way round.
"""
