"""Transports: the channel interface and one module per backend (terminal, Telegram)."""
