# The paystream image for docker-compose: ingest, consumers, the merchant API and the setup job.
# The whole build context is copied (.dockerignore leaves out what the product does not
# ship): pyproject.toml alone says which folders make the package, so a new one cannot be
# forgotten here (tests/unit/test_image_build_context.py builds the wheel from exactly
# what this file copies).
FROM python:3.11-slim
WORKDIR /app
COPY . .
RUN pip install --no-cache-dir .
USER nobody
ENTRYPOINT ["paystream"]
