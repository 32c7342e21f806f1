# One image for every role of quotaplane on Kubernetes: the Ray head and workers (the controller and shard
# actors), the gateways and frontends (`quotaplane up --ray-address ...`) and the Spark jobs.
#   docker build -t quotaplane:0.1.0 .
# bookworm: its Java 17 runtime is what PySpark 3.5+ runs on (the job CronJobs use an embedded Spark).
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY quotaplane quotaplane
COPY protos protos
# a C compiler only while installing: setup.py compiles the quota core's batch hot path and the telemetry job's point
# decoder with Cython (without one the package would install the pure-Python paths, slower)
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && pip install . && rm -rf /src \
    && python -c "from quotaplane.quota import compiled_core; assert compiled_core(), 'compiled core not built'" \
    && python -c "from quotaplane.spark import compiled_decoder; assert compiled_decoder(), 'decoder not built'" \
    && apt-get purge -y --auto-remove gcc libc6-dev && rm -rf /var/lib/apt/lists/*

RUN groupadd --gid 1000 quotaplane \
    && useradd --uid 1000 --gid 1000 --create-home --home-dir /home/quotaplane quotaplane \
    && mkdir -p /data && chown quotaplane:quotaplane /data
USER 1000:1000
WORKDIR /home/quotaplane
VOLUME ["/data"]

# gateway 9094, admin 9093, Kafka frontend 9092, metrics 9464
EXPOSE 9092 9093 9094 9464
ENTRYPOINT ["quotaplane"]
CMD ["up", "--data-dir", "/data", "--host", "0.0.0.0"]
