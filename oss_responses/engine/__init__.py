"""Engines: what turns a prompt of token ids into generated token ids."""
