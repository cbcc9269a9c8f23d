"""Per-chat sessions: the live JSON each chat's model sees, and the append-only full archive."""
