"""How passes run: one per-key work queue, its workers, the per-job records, kopf's pause."""
