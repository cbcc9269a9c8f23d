-- MEMORY.md and the daily notes of each memory scope, by name, as the scope's files would hold them.

CREATE TABLE memory_documents (
    -- The scope's folder under memory/ ("." for the owner's memory, "chats/telegram:1" for a chat's own).
    scope text NOT NULL,
    -- "MEMORY.md", or a day's note "YYYY-MM-DD.md".
    name text NOT NULL,
    content text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, name)
);
