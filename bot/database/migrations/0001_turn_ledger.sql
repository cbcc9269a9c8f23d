-- The turn ledger: transport keys handed over (Telegram's update ids), and every turn from received to delivered.

CREATE TABLE ledger_seen (
    channel_type text NOT NULL,
    key text NOT NULL,
    seen_at timestamptz NOT NULL DEFAULT now(),
    seq bigserial NOT NULL,
    PRIMARY KEY (channel_type, key)
);
CREATE INDEX ledger_seen_seq ON ledger_seen (seq);

CREATE TABLE ledger_turns (
    turn_id text PRIMARY KEY,
    -- The received message as the ledger's record object (`bot.ledger.records.received_record`).
    received jsonb NOT NULL,
    -- The reply recorded before its send; NULL until the turn is answered.
    reply text,
    delivered_at timestamptz,
    received_at timestamptz NOT NULL DEFAULT now(),
    seq bigserial NOT NULL
);
CREATE INDEX ledger_turns_open ON ledger_turns (seq) WHERE delivered_at IS NULL;
CREATE INDEX ledger_turns_delivered ON ledger_turns (delivered_at) WHERE delivered_at IS NOT NULL;
