# syntax=docker/dockerfile:1
# recache's image: the `recache` binary (and `recache-bench` beside it, which runs `recache
# bench ...` and `recache sim --plot`), and the engine plugin (shim/python with
# librecache_shim.so and its entry points) under /opt/recache/python, which charts/recache
# copies onto a volume the engine container imports it from.
#   docker build -t recache:0.1.0 .
# Checked by charts/check (hadolint); the binary it packages is the one tests/run tests.
ARG RUST_IMAGE=rust:1-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${RUST_IMAGE} AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# python3-venv: tests/prereqs puts cmake >= 3.28 (PyPI) in a venv; it also installs
# libclang-dev. Both build LightGBM (learned eviction).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3-venv \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# No nvcc here: the shim compiles its CUDA kernels with NVRTC at first use on the GPU.
ENV RECACHE_SHIM_NO_NVCC=1 RECACHE_TOOLS_HOME=/opt/tools
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    eval "$(tests/prereqs)" \
 && cargo build --release --locked -p recache -p recache-bench -p recache-shim \
 && install -D -m 0755 target/release/recache /opt/recache/bin/recache \
 && install -D -m 0755 target/release/recache-bench /opt/recache/bin/recache-bench \
 && cp target/release/librecache_shim.so shim/python/recache_shim/ \
 && /opt/tools/venv/bin/pip install --no-cache-dir --no-deps --target /opt/recache/python ./shim/python

FROM ${RUNTIME_IMAGE}
# libgomp1: LightGBM's OpenMP runtime (libstdc++ and libgcc are in the base image).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgomp1 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 65532 recache \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin recache
COPY --from=build /opt/recache/bin/recache /opt/recache/bin/recache-bench /usr/local/bin/
COPY --from=build /opt/recache/python /opt/recache/python
ENV RECACHE_LISTEN=0.0.0.0:8080
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["recache"]
CMD ["serve"]
