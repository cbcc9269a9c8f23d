"""The bot's own HTTP listener (webhook, `/healthz`)."""
