# Image for the streaming job and the simulator (docker-compose.yml). Same code, same conf.
FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless maven make \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/urbpipe
COPY pyproject.toml README.md ./
COPY pipeline ./pipeline
COPY devtools ./devtools
COPY jobs ./jobs
COPY conf ./conf
COPY jvm ./jvm
COPY scripts ./scripts
RUN scripts/setup.sh
ENV PATH=/opt/urbpipe/.venv/bin:$PATH URBPIPE_CONF=/opt/urbpipe/conf/local.yaml
CMD ["python", "jobs/stream.py", "--conf-file", "conf/local.yaml"]
