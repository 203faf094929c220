"""``python -m oss_responses.api``: serve the API with uvicorn on ``api_host:api_port``."""

from __future__ import annotations

import logging

import uvicorn

from oss_responses.api.app import create_app
from oss_responses.config import get_settings


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = get_settings()
    uvicorn.run(create_app(settings), host=settings.api_host, port=settings.api_port, log_level="info")


if __name__ == "__main__":
    main()
