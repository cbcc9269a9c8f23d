-- Chats whose id changed (a Telegram group upgraded to a supergroup): a row when the move of what the bot keeps
-- of the chat begins, `done_at` set when it is done; a move left midway is finished by the next start.
CREATE TABLE chat_moves (
    channel_type text NOT NULL,
    old_chat_id text NOT NULL,
    new_chat_id text NOT NULL,
    begun_at timestamptz NOT NULL DEFAULT now(),
    done_at timestamptz,
    PRIMARY KEY (channel_type, old_chat_id)
);
