"""The upstream servers as a fleet: the pool (routing, health, failover), the board
(pause, weight versions, membership) shared across replicas, and the preflight."""
