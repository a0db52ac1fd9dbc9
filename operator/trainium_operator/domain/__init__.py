"""Pure decisions: lifecycle, budget, failures, progress, nodes, cost, status and the cache key."""
