-- Deliveries the ingest acknowledges but never credits: NFT transfers, capacity errors,
-- transfers touching no known deposit address, removed logs and re-mined blocks. Kept so
-- nothing a provider said is lost (reconciliation and finality read them later).
-- notice_id is derived from the facts, so a redelivery records nothing new.
CREATE TABLE ingest_notices (
    notice_id   TEXT PRIMARY KEY CHECK (length(notice_id) BETWEEN 1 AND 300),
    provider    TEXT NOT NULL,
    kind        TEXT NOT NULL
        CHECK (kind IN ('nft', 'capacity_error', 'ignored', 'unsupported', 'reorg')),
    reason      TEXT NOT NULL,
    event_id    TEXT,
    delivery_id TEXT,
    trace_id    TEXT NOT NULL,
    detail      JSONB NOT NULL,
    received_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX ingest_notices_kind_idx ON ingest_notices (kind, received_at);
CREATE INDEX ingest_notices_event_idx ON ingest_notices (event_id) WHERE event_id IS NOT NULL;
