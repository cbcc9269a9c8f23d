"""Background jobs on one APScheduler owned by the running bot."""
