"""Who may talk to the bot: `access.allowedUsers`, and pairing for strangers when that list is empty."""
