"""Serving the ingest: the edge kit's uvicorn server (paystream/edge/serve.py: a public
and an admin listener, every worker serving both) with the ingest's own options.

The public listener (`--host`/`--port`) is where providers post; it answers only
`/webhooks/*` and `/healthz` (ingest/app.py). The admin listener
(PAYSTREAM_INGEST_ADMIN_HOST:PAYSTREAM_INGEST_ADMIN_PORT, loopback by default) serves
metrics, readiness, /docs and /openapi.json. Both speak the edge protocol
(ingest/http_edge.py: the limits uvicorn lacks).
"""

from __future__ import annotations

import uvicorn

from paystream.edge import serve as edge
from paystream.env import variable_name
from paystream.ingest.app import FACTORY
from paystream.ingest.settings import IngestSettings

PROTOCOL = "paystream.ingest.http_edge:EdgeProtocol"


def uvicorn_config(settings: IngestSettings, host: str, port: int, workers: int,
                   app: str = FACTORY) -> uvicorn.Config:
    return edge.uvicorn_config(app, host, port, workers,
                               trusted_proxies=settings.trusted_proxies, http=PROTOCOL)


def serve(settings: IngestSettings, host: str, port: int, workers: int) -> None:
    """Run the ingest until it is told to stop (SIGINT, SIGTERM)."""
    edge.serve(uvicorn_config(settings, host, port, workers),
               admin_host=settings.admin_host, admin_port=settings.admin_port,
               admin_port_variable=variable_name(IngestSettings, "admin_port"))
