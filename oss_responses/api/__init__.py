"""The HTTP API: OpenAI's Responses API over the SQL store, the Redis event log and Celery.

``create_app(settings)`` builds the FastAPI app; its lifespan opens the database, Redis, the event
hub and the Celery producer. ``python -m oss_responses.api`` serves it with uvicorn.
"""

from oss_responses.api.app import create_app

__all__ = ["create_app"]
