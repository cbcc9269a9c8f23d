"""The model side: the OpenAI-compatible client, the registry of model limits, and the embedders
(the bundled offline model and the endpoint's `/embeddings`)."""
