-- The runtime configuration: one row holding the text of runtime-config.json, and a version every write raises
-- (what each process polls to see a change).

CREATE TABLE runtime_config (
    id boolean PRIMARY KEY DEFAULT true CHECK (id),
    document text NOT NULL,
    version bigint NOT NULL DEFAULT 1,
    updated_at timestamptz NOT NULL DEFAULT now()
);
