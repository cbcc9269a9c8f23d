"""The model side: the OpenAI-compatible client and the registry of model limits."""
