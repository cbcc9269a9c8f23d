"""The fourth memory layer: a LightRAG knowledge graph over every past conversation.

- `documents`: what a finished exchange becomes (`conv_{session}_{YYYYMMDD_HHmmss}`), which are skipped.
- `store`: the journal, the durable indexing queue and the record of indexed documents: its interface
  (`RagJournal`) and its file (`workspace/rag/documents.jsonl`); `journal_table`: the same in PostgreSQL, shared
  by every replica (with `BOT_DATABASE_URL`; `factory` picks one at start).
- `service`: `RagService`: enqueue (RagIndexingSystem, 55), flush (the scheduler), retrieve (`# Relevant
  Memory` at ContextBuilding, 20), search (the `rag_query` tool), forget, status.
- `backend`: the `RagBackend` protocol; `embedded` (lightrag-hku in the process, file or PostgreSQL
  storages) and `server` (a LightRAG server over HTTP) implement it; `factory` picks one at start.
- `tokenizer`: the offline tokenizer LightRAG is given, so nothing is downloaded at run time.
- `graph_batches`: batched reads for LightRAG's file graph storage (one lock per batch, not per item).
- `keywords`: what in a message is worth looking up, decided without a model.
- `reading` and `uploads`: documents sent in a chat (text extraction and limits; `DocumentReader`: queue,
  progress message, resume after a restart, `/docs`); `upload_records`: their record (`UploadRecords`) and
  its file (`workspace/rag/uploads.jsonl`); `upload_table`: the same in PostgreSQL, shared by every replica.
- `tool`: the `rag_query` tool.
"""
