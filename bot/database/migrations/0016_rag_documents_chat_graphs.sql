-- The LightRAG workspaces holding each chat's indexed documents, found in a few index probes: a chat whose id
-- changed (a group upgraded to a supergroup) keeps its documents in the workspace of its earlier id, which its
-- retrievals read beside its own.
CREATE INDEX rag_documents_chat_graphs ON rag_documents (session_id, rag_workspace) WHERE status = 'indexed';
