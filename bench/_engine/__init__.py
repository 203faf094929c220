"""Helpers of bench/engine.py (a package, so ``make bench`` does not run them as benches)."""
