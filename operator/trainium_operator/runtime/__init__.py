"""How passes run: one per-key work queue, its workers, the per-job records, the Lease election."""
