# The API, the MCP demo servers and a scripted-engine worker (no GPU): the `oss-responses` command.
FROM python:3.11-slim
WORKDIR /src
COPY requirements.txt ./
RUN pip install --no-cache-dir -r requirements.txt
# The service is installed as a package (its migrations inside it); the source does not stay in /app.
COPY pyproject.toml ./
COPY oss_responses ./oss_responses
RUN pip install --no-cache-dir --no-deps /src && rm -rf /src
WORKDIR /app
ENV OSS_RESPONSES_TIKTOKEN_DIR=/app/var/tiktoken
# Unpack and check the harmony vocabulary at build time, so containers never try to download it.
RUN python -c "from oss_responses.vocab import load_encoding; load_encoding()"
EXPOSE 8000
CMD ["oss-responses", "api"]
