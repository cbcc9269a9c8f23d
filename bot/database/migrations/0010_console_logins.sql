-- The web console's login links and sessions, shared by every process of the database (so a link sent through
-- one replica opens on another). Each is kept under the SHA-256 digest of its token: a row cannot log anyone in.

CREATE TABLE console_links (
    key text PRIMARY KEY,
    person text NOT NULL,
    owner boolean NOT NULL,
    expires_at timestamptz NOT NULL
);

CREATE TABLE console_sessions (
    key text PRIMARY KEY,
    person text NOT NULL,
    owner boolean NOT NULL,
    csrf text NOT NULL,
    expires_at timestamptz NOT NULL
);
