-- The documents sent in chats, shared by every process of the database: one row per chat and file (`id`, the
-- hash of its bytes), as each line of rag/uploads.jsonl holds; a forgotten upload's row is deleted.
-- `parts` are the ids of its parts in rag_documents. `owner` (`Database.process_id`) watches a reading
-- (`status` 'reading': edits its progress message, sends its last line); one whose owner is gone (its presence
-- lock is free) is taken over by another process. NULL: nobody yet (copied by `bot migrate`).

CREATE TABLE rag_uploads (
    session_id text NOT NULL,
    id text NOT NULL,
    position bigint GENERATED ALWAYS AS IDENTITY,
    name text NOT NULL,
    channel_type text NOT NULL,
    chat_id text NOT NULL,
    parts text[] NOT NULL,
    -- ISO 8601, as the file writes it.
    created_at text NOT NULL,
    progress_message_id text,
    status text NOT NULL,
    problems text[] NOT NULL,
    owner text,
    PRIMARY KEY (session_id, id)
);
CREATE INDEX rag_uploads_reading ON rag_uploads (owner) WHERE status = 'reading';
