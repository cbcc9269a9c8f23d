"""Tools the model can call.

- `registry`: `ToolRegistry`, tools with pydantic argument models, validated execution, cached schemas.
- `workspace_files`: `read_file`, `write_file`, `append_file`, `list_dir`, confined to the workspace.
- `output_pruning`: old tool results trimmed or cleared in what is sent (layer 1 of context control).
- `eviction`: large outputs saved to `tool_results/{chat}/` and replaced by a preview.
- `orphans`: tool calls left without a result closed before the next model call.

The memory, history, RAG and reminder tools live with what they act on and register here.
"""
