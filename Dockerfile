# A self-hosted memory bot. Build: docker build -t memory-bot .   Run: see docker-compose.yml.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    BOT_WORKSPACE=/data/workspace \
    BOT_LISTEN_HOST=0.0.0.0 \
    BOT_LISTEN_PORT=8080

RUN groupadd --system --gid 10001 bot \
    && useradd --system --uid 10001 --gid bot --home-dir /app --shell /usr/sbin/nologin bot

WORKDIR /app
# Dependencies first, so a code change does not reinstall them.
COPY pyproject.toml README.md ./
COPY config ./config
COPY workspace_template ./workspace_template
COPY bot/__init__.py bot/__init__.py
# The postgres extra (the asyncpg driver): BOT_DATABASE_URL works in the image as it does anywhere.
RUN pip install --no-compile "./[postgres]" && pip uninstall -y memory-bot
COPY bot ./bot
RUN pip install --no-compile --no-deps . \
    && mkdir -p /data/workspace \
    && chown -R bot:bot /data

USER 10001:10001
VOLUME ["/data/workspace"]
EXPOSE 8080

HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ.get('BOT_LISTEN_PORT', '8080')}/healthz\", timeout=4)"]

ENTRYPOINT ["python", "-m", "bot"]
CMD ["run"]
