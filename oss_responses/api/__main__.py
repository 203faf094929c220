"""``python -m oss_responses.api``: serve the API with uvicorn on ``api_host:api_port``."""

from __future__ import annotations

import uvicorn

from oss_responses.api.app import create_app
from oss_responses.config import get_settings
from oss_responses.heap import tune_garbage_collection
from oss_responses.logs import configure_logging
from oss_responses.schemas import build_protocol_schemas
from oss_responses.vocab import ensure_vocabulary


def main() -> None:
    settings = get_settings()
    configure_logging(settings)
    # Unpacked now, not by the first /v1/responses/input_tokens request (which loads the encoding).
    ensure_vocabulary(settings.tiktoken_dir)
    app = create_app(settings)
    build_protocol_schemas("api")
    tune_garbage_collection("api")  # here, not in the app's lifespan: tests run the app inside pytest
    # log_config=None: uvicorn's loggers propagate to the root handler configured above.
    uvicorn.run(app, host=settings.api_host, port=settings.api_port, log_config=None)


if __name__ == "__main__":
    main()
