# seedproxy: the proxy alone (core install plus the Redis client; no torch, no engine).
# Point it at SGLang/vLLM servers with --upstream. Binding 0.0.0.0 needs an admin key:
#   docker run -e SEEDPROXY_ADMIN_KEY=... -p 8000:8000 seedproxy --upstream http://gpu1:30000
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SEEDPROXY_HOST=0.0.0.0 \
    SEEDPROXY_PORT=8000

WORKDIR /app
COPY pyproject.toml README.md ./
COPY src ./src
# DL3013 asks to pin what pip installs: here it is this checkout, whose own
# dependencies are bounded in pyproject.toml.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir '.[redis]' \
    && useradd --create-home --uid 10001 --user-group --shell /usr/sbin/nologin seedproxy

USER 10001:10001
EXPOSE 8000

# slim has no curl: probe /healthz with the standard library.
HEALTHCHECK --interval=15s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('SEEDPROXY_PORT', '8000'), timeout=4)"]

ENTRYPOINT ["seedproxy", "serve"]
