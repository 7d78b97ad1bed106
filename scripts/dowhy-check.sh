#!/usr/bin/env bash
# DoWhy (PyPI `dowhy`, the graphical-causal-model library people use for root-cause
# analysis) and `redline explain` on the same data from the generator of DoWhy's
# microservice example: both must blame the slowed caching service first and agree on
# its contribution. Installs DoWhy into a venv.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${REDLINE_VENV_DIR:-target/venv-dowhy}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check 'dowhy>=0.12,<0.15'
cargo build --release --quiet
"$venv/bin/python" scripts/dowhy_check.py ./target/release/redline
