# The asktell server. Build: `docker build -t asktell .`
# Run:   docker run -p 8000:8000 -e ASKTELL_DATABASE_URL=postgresql://... asktell
# (without ASKTELL_DATABASE_URL it serves an embedded SQLite file in /data). For PostgreSQL, run
# `asktell db upgrade` once first: the server refuses a database that is not migrated.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src

# torch first, from the CPU-only index (the default wheel drags in GBs of CUDA libraries). Its
# own layer, so code changes do not download it again. `.[server]` then finds ==2.13.0 satisfied.
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

# Only what the package needs.
COPY pyproject.toml README.md* ./
COPY client ./client
COPY engines ./engines
COPY service ./service
COPY migrations ./migrations
# EXTRAS=server,ray (docker-compose.yml) adds Ray, for tuning jobs on a Ray cluster.
ARG EXTRAS=server
RUN pip install ".[${EXTRAS}]" && rm -rf /src

# An unprivileged user; /data holds the default SQLite file, /artifacts the artifact store when
# ASKTELL_ARTIFACTS_DIR points there (docker-compose.yml: a volume the replicas share).
RUN useradd --create-home --uid 10001 asktell && mkdir /data /artifacts \
    && chown asktell /data /artifacts
USER asktell
WORKDIR /data
ENV ASKTELL_DATABASE_URL=sqlite:////data/asktell.db
# The SQLite file and the artifact store beside it.
VOLUME ["/data"]

EXPOSE 8000
CMD ["asktell", "serve", "--host", "0.0.0.0", "--port", "8000"]
