"""PostgreSQL, when `BOT_DATABASE_URL` is set: the connection pool and the schema's versioned migrations.

It knows no concern: each package that keeps state in the database has its own store there (the turn
ledger's is `bot.ledger.postgres`), chosen beside the files' one in one place at start (`bot.stores`).
"""
