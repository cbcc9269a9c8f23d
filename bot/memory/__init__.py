"""The bot's memory: MEMORY.md, daily notes, structured items, and what the prompt is given of them.

One module per concept:

- `paths`: where a memory scope keeps its files (`memory.scope`: `global`, one per `chat`, or per `user`).
- `long_term`, `daily_notes`, `legacy_context`, `file_cache`: MEMORY.md, the daily note lines, the
  legacy `## Today's Notes` / `## Recent Context` sections, and reading them only when changed.
- `documents`, `postgres_documents`: where MEMORY.md and the notes are kept (the scope's files, or
  PostgreSQL's `memory_documents` with `BOT_DATABASE_URL`).
- `item_files`, `index_database`, `items_store`: reading the JSONL item files (bad lines kept), the
  SQLite index derived from them (items out of RAM), and the store over both: kept in step with hand
  edits, group-committed writes. `item_storage` is the interface of an item store; `postgres_items` the
  one over PostgreSQL's `memory_items` with `BOT_DATABASE_URL` (and the vectors in `memory_vectors`).
- `extraction`, `llm_extraction`: what of a turn becomes SEMANTIC or PROCEDURAL knowledge.
- `write_service`: dedup by fingerprint, supersede by slot key, promotion, decay, pins, forgetting.
- `lexical_index`, `embeddings`, `temporal`, `retrieval`: BM25, item vectors (made by `bot.llm`'s
  embedders, kept by `vector_cache`) and time cues, scored with recency, salience and confidence.
- `prompt_pack`, `budget`: rendering under the soft and max token budgets, cuts made visible.
- `service`: the facade the pipeline (20, 50), `/memory`, `/status` and the tools use.
- `tools`: `memory_search`, `memory_add`, `memory_update`, `memory_promote`, `memory_forget`,
  `read_memory`, `write_memory`, `update_memory`.
- `compaction_sink`: turns about to be compacted reach memory first.
"""
