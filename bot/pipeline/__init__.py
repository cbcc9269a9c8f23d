"""The numbered pipeline every inbound message runs through: 18 → 20 → 30 → reply (`outbound`) → 50 → 55."""
