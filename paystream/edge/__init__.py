"""The HTTP edge kit: what the ingest (ingest/) and the merchant API (api/) both serve with.

  errors.py      the refusals, one class per HTTP status, and the one JSON error body
  db_threads.py  psycopg2 work for an asyncio server: a few threads, each with its own
                 connection, fed from one queue (the merchant API's transactions)
"""
