FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY dashboard dashboard
COPY collector collector
COPY demo demo
COPY notify notify
COPY templates templates
COPY static static
COPY manage.py ./
RUN pip install --no-cache-dir . && useradd --system --uid 10001 claimline && mkdir -p /app/var && chown claimline /app/var
USER claimline
EXPOSE 8000
CMD ["gunicorn", "dashboard.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3"]
