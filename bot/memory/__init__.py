"""The bot's memory: MEMORY.md, daily notes, structured items, and what the prompt is given of them."""
