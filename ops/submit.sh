#!/usr/bin/env bash
# Submit an ingest to a running Ray cluster.
#   RAY_ADDRESS=http://head:8265 ops/submit.sh --config configs/gpu.yaml --input /data/notes
# The driver runs on the head node and reads DATABASE_URL from the environment Ray was started
# with there; never pass it with --database-url here, where it would land in the job's logs.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${RAY_ADDRESS:?set RAY_ADDRESS to the cluster's dashboard address, e.g. http://head:8265}"
exec ray job submit --address "$RAY_ADDRESS" --working-dir . \
  --runtime-env-json '{"excludes": [".venv", ".corpusmill", "tests/data", ".git"]}' \
  -- corpusmill ingest "$@"
