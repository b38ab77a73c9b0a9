# syntax=docker/dockerfile:1
# Multi-stage build of payments-api. Base images are build args so machines without a registry
# can pass local stand-ins (CI: offline/rust:bookworm and offline/debian:bookworm).
ARG RUST_IMAGE=rust:1-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${RUST_IMAGE} AS build
WORKDIR /src
# Queries are checked against the committed .sqlx metadata: the build needs no database. The
# binary is stripped, so the line tables the release profile keeps for profiling are not built.
ENV SQLX_OFFLINE=true CARGO_TERM_COLOR=never CARGO_PROFILE_RELEASE_DEBUG=false
# Dependencies first, in their own layer, so a source change does not rebuild them.
COPY Cargo.toml Cargo.lock ./
RUN mkdir src && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
    && cargo build --release --locked --bin payments-api \
    && rm -rf src
COPY .sqlx .sqlx
COPY migrations migrations
# The token's ABI bindings are generated at compile time from its committed artifact.
COPY contracts/build contracts/build
COPY src src
RUN touch src/main.rs src/lib.rs && cargo build --release --locked --bin payments-api \
    && strip target/release/payments-api

FROM ${RUNTIME_IMAGE}
COPY --from=build /src/target/release/payments-api /usr/local/bin/payments-api
# An unprivileged user; no shell or home needed.
USER 10001:10001
ENV BIND_ADDR=0.0.0.0:8080 LOG_FORMAT=json
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/payments-api"]
CMD ["serve"]
