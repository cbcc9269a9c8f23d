"""File primitives every store builds on: atomic rewrites and torn-line-tolerant JSONL."""
