"""oss-responses: OpenAI's Responses API for gpt-oss, as durable background jobs."""
