"""Serving the ingest: one uvicorn server, two listeners, the edge protocol on both.

The public listener (`--host`/`--port`) is where providers post; it answers only
`/webhooks/*` and `/healthz` (ingest/app.py). The admin listener
(PAYSTREAM_INGEST_ADMIN_HOST:PAYSTREAM_INGEST_ADMIN_PORT, loopback by default) serves
metrics, readiness, /docs and /openapi.json. Both sockets are bound here, before the
workers start, and every worker serves both (so each worker's /metrics is scraped from
the admin port, as before from the public one).
"""

from __future__ import annotations

import uvicorn
from uvicorn.supervisors import Multiprocess

from paystream.env import SettingsError
from paystream.ingest.settings import IngestSettings
from paystream.launch import bind_listener

APP = "paystream.ingest.app:create_app_from_env"
PROTOCOL = "paystream.ingest.http_edge:EdgeProtocol"
KEEP_ALIVE_S = 5  # idle time between requests on one connection (uvicorn's default)


def uvicorn_config(settings: IngestSettings, host: str, port: int, workers: int,
                   app: str = APP) -> uvicorn.Config:
    trusted = list(settings.trusted_proxies)
    return uvicorn.Config(
        app, factory=True, host=host, port=port, workers=workers, access_log=False,
        log_level="warning", lifespan="on", http=PROTOCOL,
        # X-Forwarded-For is believed only from the configured proxies (none by
        # default): otherwise a sender picks the address its limits are charged to.
        proxy_headers=bool(trusted), forwarded_allow_ips=trusted or None,
        timeout_keep_alive=KEEP_ALIVE_S, server_header=False)


def serve(settings: IngestSettings, host: str, port: int, workers: int) -> None:
    """Run the ingest until it is told to stop (SIGINT, SIGTERM)."""
    if settings.admin_port == port:
        raise SettingsError(f"PAYSTREAM_INGEST_ADMIN_PORT {port} is the public port")
    config = uvicorn_config(settings, host, port, workers)
    sockets = [config.bind_socket(), bind_listener(settings.admin_host, settings.admin_port)]
    server = uvicorn.Server(config)
    if workers > 1:
        Multiprocess(config, sockets=sockets).run()
    else:
        server.run(sockets=sockets)
