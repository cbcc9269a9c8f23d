"""The turn ledger: the one record of exactly-once delivery.

Each message a person sends is a turn, and the ledger (`turns.TurnLedger`) says how far each got:
received (durable before the transport is told it arrived), answered (the reply stored, its text kept
to send), delivered (sent, or ended without a reply on purpose). The channel asks it whether an
update was seen before; the pipeline records each step and asks it, after a restart, what is left to
answer or to send. It knows the domain and the storage helpers, nothing of channels or the pipeline.
"""
