"""Serving an edge: one uvicorn server, two listeners, every worker serving both.

The public listener (`--host`/`--port`) is what callers reach; the admin listener
(loopback by default) serves metrics, readiness, /docs and /openapi.json. Both sockets
are bound here, before the workers start (so each worker's /metrics is scraped from the
admin port). The app is a factory (`module:function`), called once per worker.
"""

from __future__ import annotations

import gc
from typing import Any, TypeVar

import uvicorn
from uvicorn.supervisors import Multiprocess

from paystream.env import SettingsError
from paystream.launch import bind_listener

KEEP_ALIVE_S = 5  # idle time between requests on one connection (uvicorn's default)
App = TypeVar("App")


def uvicorn_config(factory: str, host: str, port: int, workers: int,
                   trusted_proxies: tuple[str, ...] = (), **options: Any) -> uvicorn.Config:
    """The edges' uvicorn settings; `options`: an edge's own (its protocol).

    X-Forwarded-For is believed only from `trusted_proxies` (IPs or CIDRs; none by
    default). uvicorn's own default trusts 127.0.0.1, and an edge on loopback would then
    let every client pick the address its limits are charged to."""
    trusted = list(trusted_proxies)
    return uvicorn.Config(factory, factory=True, host=host, port=port, workers=workers,
                          access_log=False, log_level="warning", lifespan="on",
                          timeout_keep_alive=KEEP_ALIVE_S, server_header=False,
                          proxy_headers=bool(trusted), forwarded_allow_ips=trusted or None,
                          **options)


def serve(config: uvicorn.Config, *, admin_host: str, admin_port: int,
          admin_port_variable: str) -> None:
    """Run until told to stop (SIGINT, SIGTERM); SettingsError if the admin port is the
    public one (`admin_port_variable` names the setting) or cannot be bound."""
    if admin_port == config.port:
        raise SettingsError(f"{admin_port_variable} {config.port} is the public port")
    sockets = [config.bind_socket(), bind_listener(admin_host, admin_port)]
    if config.workers > 1:
        Multiprocess(config, sockets=sockets).run()
    else:
        uvicorn.Server(config).run(sockets=sockets)


def frozen(app: App) -> App:
    """What a worker's factory returns: what exists now (modules, the app) lives as long
    as the process, and freezing it keeps it out of every later collection, which
    otherwise re-scans it each time the per-request garbage reaches an older generation
    (+5 % saturated throughput, bench/ingest_bench.py)."""
    gc.collect()
    gc.freeze()
    return app
