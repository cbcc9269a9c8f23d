"""A self-hosted AI assistant for Telegram whose memory never silently loses what matters."""

__version__ = "0.1.0"
