"""The web console at `/console` on the bot's HTTP listener: memory, why a reply said what it said, the
knowledge graph, settings and health, for the owner (and, with `memory.scope: user`, each person's own
memory). Login is by a single-use link the bot sends in answer to `/console` (`bot.console.auth`); the
pages are rendered on the server (`bot.console.html`), one module per page."""
