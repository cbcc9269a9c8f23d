-- The process that answers each open turn (`Database.process_id`): another takes the turn over once that
-- process's presence lock is free (it stopped or died). NULL: a turn written before owners were kept.
ALTER TABLE ledger_turns ADD COLUMN owner text;
