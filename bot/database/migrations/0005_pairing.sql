-- Pairing: strangers' codes waiting for the owner, and the users the owner admitted (ids, usernames, times only).

CREATE TABLE pairing_requests (
    code text PRIMARY KEY,
    user_id bigint NOT NULL UNIQUE,
    username text,
    requested_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);

CREATE TABLE pairing_approved (
    user_id bigint PRIMARY KEY,
    username text,
    approved_at timestamptz NOT NULL
);
