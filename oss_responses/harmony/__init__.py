"""Harmony <-> Responses: rendering requests to gpt-oss prompts and translating tokens to events.

Pure and synchronous: no Redis, Celery, SQL or engine in this package.
"""
