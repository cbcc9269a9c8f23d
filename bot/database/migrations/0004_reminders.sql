-- Reminders: one row each, the same object as an entry of reminders.json; `due_at` is the next time it fires.

CREATE TABLE reminders (
    id text PRIMARY KEY,
    session_id text NOT NULL,
    channel_type text NOT NULL,
    due_at timestamptz NOT NULL,
    -- The whole reminder as reminders.json holds it (camelCase keys).
    reminder jsonb NOT NULL
);
CREATE INDEX reminders_due ON reminders (due_at);
CREATE INDEX reminders_session ON reminders (session_id);
