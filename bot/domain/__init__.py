"""Plain data the systems pass around: messages, sessions, the per-message turn context. No I/O."""
