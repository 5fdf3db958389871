"""Serving the API: one uvicorn server, two listeners (as the ingest, ingest/serve.py).

The public listener (`--host`/`--port`) answers `/v1/*` and `/healthz`; the admin
listener (PAYSTREAM_API_ADMIN_HOST:PAYSTREAM_API_ADMIN_PORT, loopback by default)
metrics, readiness, /docs and /openapi.json. Both are bound before the workers start.
"""

from __future__ import annotations

import uvicorn
from uvicorn.supervisors import Multiprocess

from paystream.api.settings import ApiSettings
from paystream.env import SettingsError
from paystream.launch import bind_listener

APP = "paystream.api.app:create_app_from_env"


def serve(settings: ApiSettings, host: str, port: int, workers: int) -> None:
    """Run the API until it is told to stop (SIGINT, SIGTERM)."""
    if settings.admin_port == port:
        raise SettingsError(f"PAYSTREAM_API_ADMIN_PORT {port} is the public port")
    config = uvicorn.Config(APP, factory=True, host=host, port=port, workers=workers,
                            access_log=False, log_level="warning", lifespan="on",
                            timeout_keep_alive=5, server_header=False)
    sockets = [config.bind_socket(),
               bind_listener(settings.admin_host, settings.admin_port)]
    if workers > 1:
        Multiprocess(config, sockets=sockets).run()
    else:
        uvicorn.Server(config).run(sockets=sockets)
