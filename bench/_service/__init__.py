"""Helpers of bench/service.py: the stack it starts, its raw SSE client, the traced worker."""
