"""Keeping the prompt inside the model's context: token estimates and the budget."""
