FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
# Every package of pyproject.toml's [tool.setuptools.packages.find], bottom layer first.
COPY domain domain
COPY collector collector
COPY derived derived
COPY access access
COPY demo demo
COPY notify notify
COPY dashboard dashboard
COPY claimline claimline
COPY templates templates
COPY static static
COPY manage.py ./
RUN pip install --no-cache-dir . && useradd --system --uid 10001 claimline && mkdir -p /app/var && chown claimline /app/var
USER claimline
EXPOSE 8000
CMD ["gunicorn", "claimline.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3"]
