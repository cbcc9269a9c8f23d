"""Tools the model can call: the registry and the workspace tools (filled in by the tool-loop work)."""
