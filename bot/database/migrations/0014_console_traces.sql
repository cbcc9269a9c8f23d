-- The console's "why this reply": the recent turns of each chat, shared by every process of the database (a turn
-- answered by one replica is shown by the console of any). One row a turn, its trace as the JSON object the
-- files hold (`text`, every character outside ASCII escaped: a trace may hold text jsonb cannot); each chat keeps
-- its newest `console.turnsKept` rows, by `position`.

CREATE TABLE console_traces (
    position bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id text NOT NULL,
    trace text NOT NULL
);
CREATE INDEX console_traces_chat ON console_traces (session_id, position);
