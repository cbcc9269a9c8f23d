-- The knowledge graph's journal, shared by every process of the database: one row per document (an exchange,
-- or a part of a document sent in a chat) with its state and origin, as each line of rag/documents.jsonl holds.
-- `text` is kept while it is needed (queued, or indexed in a batch with others), '' otherwise.
-- `claimed_by` (`Database.process_id`) indexes a queued row until `claim_until`; NULL: nobody.
-- A `forgotten` row exists only while the process that claimed it has not yet recorded its insert.

CREATE TABLE rag_documents (
    id text PRIMARY KEY,
    position bigint GENERATED ALWAYS AS IDENTITY,
    session_id text NOT NULL,
    rag_workspace text NOT NULL,
    text text NOT NULL,
    -- ISO 8601, as the journal writes it.
    created_at text NOT NULL,
    message_ids text[] NOT NULL,
    status text NOT NULL,
    attempts integer NOT NULL,
    -- Unix time of the next try.
    next_attempt_at double precision NOT NULL,
    last_error text,
    backend_id text,
    claimed_by text,
    claim_until timestamptz
);
CREATE INDEX rag_documents_queue ON rag_documents (position) WHERE status = 'queued';
CREATE INDEX rag_documents_session ON rag_documents (session_id);
CREATE INDEX rag_documents_messages ON rag_documents USING gin (message_ids);
CREATE INDEX rag_documents_backend ON rag_documents ((coalesce(backend_id, id)));
CREATE INDEX rag_documents_indexed ON rag_documents (rag_workspace) WHERE status = 'indexed';
