-- Sessions and their archive: each chat's stored document, and every message it ever had.

CREATE TABLE sessions (
    id text PRIMARY KEY,
    -- The session's whole JSON document, the same as a session file holds.
    document text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sessions_updated ON sessions (updated_at);

CREATE TABLE session_archive (
    session_id text NOT NULL,
    -- The archive's length in bytes after this line (the line's bytes and its newline, as in a file).
    end_bytes bigint NOT NULL,
    line text NOT NULL,
    PRIMARY KEY (session_id, end_bytes)
);

-- Documents that did not parse, put aside (never lost) while the chat starts afresh.
CREATE TABLE sessions_quarantined (
    name text PRIMARY KEY,
    session_id text NOT NULL,
    document text NOT NULL,
    quarantined_at timestamptz NOT NULL DEFAULT now()
);
