# The API, the MCP demo servers and a scripted-engine worker (no GPU).
FROM python:3.11-slim
WORKDIR /app
COPY requirements.txt ./
RUN pip install --no-cache-dir -r requirements.txt
COPY oss_responses ./oss_responses
COPY migrations ./migrations
COPY alembic.ini* ./
ENV OSS_RESPONSES_TIKTOKEN_DIR=/app/var/tiktoken
# Unpack and check the harmony vocabulary at build time, so containers never try to download it.
RUN python -c "from oss_responses.harmony.vocab import load_encoding; load_encoding()"
EXPOSE 8000
CMD ["python", "-m", "oss_responses.api"]
