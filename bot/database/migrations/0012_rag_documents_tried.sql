-- The names of the backend documents each document was sent in, recorded before each insert: an insert whose
-- wait ran out may still finish in the backend, and a forget deletes what it holds under those names.
ALTER TABLE rag_documents ADD COLUMN tried_as text[] NOT NULL DEFAULT '{}';
