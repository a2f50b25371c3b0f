#!/usr/bin/env bash
# Submit an ingest (or any corpusmill command) to a running Ray cluster as a Ray job.
#
#   RAY_ADDRESS=http://head:8265 ops/submit.sh ingest --config configs/gpu.yaml --input /data/notes
#   RAY_ADDRESS=http://head:8265 DATABASE_URL_FILE=/etc/corpusmill/db-url ops/submit.sh ingest ...
#
# The working directory (this repository, without .venv, run outputs, test data and .git) is
# uploaded as the job's working_dir, so the cluster runs this checkout's code with the dependencies
# its image already holds (docker/). The database URL never passes through here: the driver reads it
# from a file on the head node named by DATABASE_URL_FILE (a mounted secret; only the path is sent),
# or from DATABASE_URL in the environment the head was started with. A URL given with
# --database-url would be stored with the job and printed in its logs, so it is refused here.
# The first argument is the corpusmill command; `ingest` is assumed when it is an option.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${RAY_ADDRESS:?set RAY_ADDRESS to the dashboard address of the cluster, e.g. http://head:8265}"
for arg in "$@"; do
  opt="${arg%%=*}"
  # argparse takes any unambiguous prefix (--data, --d) for --database-url: refused the same.
  if [[ "$opt" == --d* && "--database-url" == "$opt"* ]]; then
    echo "ops/submit.sh: do not pass --database-url to a cluster job (it lands in the job's logs);" \
         "put the URL in a file on the head node and set DATABASE_URL_FILE to its path" >&2
    exit 2
  fi
done
if [[ $# -eq 0 || "$1" == -* ]]; then set -- ingest "$@"; fi
PYTHON=${PYTHON:-python3}
# Only the path of the URL file travels with the job, never the secret itself.
runtime_env=$("$PYTHON" -c '
import json, os
env = {"TOKENIZERS_PARALLELISM": "false"}
if os.environ.get("DATABASE_URL_FILE"):
    env["DATABASE_URL_FILE"] = os.environ["DATABASE_URL_FILE"]
excludes = [".venv", ".corpusmill", "tests/data", ".git", ".hypothesis", ".pytest_cache"]
print(json.dumps({"excludes": excludes, "env_vars": env}))
')
exec ray job submit --address "$RAY_ADDRESS" --working-dir . --runtime-env-json "$runtime_env" \
  ${SUBMIT_ID:+--submission-id "$SUBMIT_ID"} -- corpusmill "$@"
