-- The process that claimed each transport key (`Database.process_id`) until what the key brought is kept:
-- its turn recorded, or the update settled without one. A key whose claimer is gone (its presence lock is
-- free) before that is taken over by the process a redelivery reaches. NULL: settled.
ALTER TABLE ledger_seen ADD COLUMN owner text;
