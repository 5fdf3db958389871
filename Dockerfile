# The paystream image for docker-compose: ingest, consumers, the merchant API and the setup job.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY paystream ./paystream
COPY schema ./schema
COPY ingest ./ingest
COPY consumers ./consumers
COPY connectors ./connectors
COPY finality ./finality
COPY ops ./ops
COPY stack ./stack
COPY api ./api
RUN pip install --no-cache-dir .
USER nobody
ENTRYPOINT ["paystream"]
