# syntax=docker/dockerfile:1
# Multi-stage build: compile with the Rust toolchain, ship only the binary on a
# small Debian base, running as an unprivileged user.

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
# Queries are checked against the committed .sqlx data: no database at build time.
ENV SQLX_OFFLINE=true
COPY Cargo.toml Cargo.lock ./
COPY .sqlx ./.sqlx
COPY migrations ./migrations
COPY src ./src
# The console's templates, compiled into the binary.
COPY templates ./templates
# Declared targets must exist for Cargo to read the manifest.
COPY tests ./tests
COPY benches ./benches
RUN cargo build --release --locked --bin webhookd \
    && cp target/release/webhookd /usr/local/bin/webhookd

FROM debian:bookworm-slim
# TLS roots are compiled in (webpki-roots); nothing else is needed at run time.
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin webhookd \
    && mkdir -p /var/lib/webhookd/paypal-certs \
    && chown 10001:10001 /var/lib/webhookd/paypal-certs
COPY --from=build /usr/local/bin/webhookd /usr/local/bin/webhookd
USER 10001:10001
# The admin listener (console, metrics, health) on every interface of the
# container: publish it on the host's loopback only (docker-compose.yml).
ENV WEBHOOKD_LISTEN=0.0.0.0:8080 \
    WEBHOOKD_ADMIN_LISTEN=0.0.0.0:9090 \
    WEBHOOKD_LOG_FORMAT=json
EXPOSE 8080 9090
# No curl in the image: the binary checks itself.
HEALTHCHECK --interval=10s --timeout=5s --start-period=15s --retries=3 \
    CMD ["webhookd", "healthcheck"]
ENTRYPOINT ["webhookd"]
CMD ["serve"]
