"""The LightRAG knowledge graph over past conversations (filled in by the RAG work)."""
