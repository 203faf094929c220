"""The synthetic GPU of bench/worker_ceiling.py."""
