"""One module per numbered system: 18 auto-compaction, 20 context building, 30 tool loop,
50 memory persist, 55 RAG indexing."""
