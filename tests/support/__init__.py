"""Helpers shared by the test suite: real servers started in temporary directories."""
