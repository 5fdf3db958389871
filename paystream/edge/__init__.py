"""The HTTP edge kit: what the ingest (ingest/) and the merchant API (api/) both serve with.

  errors.py      the refusals, one class per HTTP status, and the one JSON error body
  app.py         EdgeApp, the ASGI front uvicorn serves (observed; each request to what
                 the edge picks by port and path), and the FastAPI app's common setup
  observe.py     the outermost ASGI layer: trace id, one log line and the request
                 metrics per answer, a JSON 500 for what nothing else answered
  metrics.py     the request metrics, under each edge's own names
  handlers.py    a FastAPI app's errors (refusals, 404/405, validation, bugs) answered
                 in the one body
  probes.py      the admin port's /healthz, /readyz and /metrics
  params.py      the rules for values in a URL or a form (ids, row numbers, free text
                 without control characters), shared by the API and the console
  serve.py       uvicorn with a public and an admin listener (X-Forwarded-For believed
                 only from named proxies); the worker factory's freeze
  db_threads.py  psycopg2 work for an asyncio server: a few threads, each with its own
                 connection, fed from one queue (the merchant API's transactions)

What stays with each edge: its routes, its refusals with their own codes, its metric
names, and (the ingest) the connection limits uvicorn lacks (ingest/http_edge.py).
"""
