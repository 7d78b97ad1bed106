#!/usr/bin/env bash
# redline's graders beside the reference implementations on the same answers
# (scripts/grading_check.py): BFCL's own AST checker (PyPI bfcl-eval, installed
# without its model clients: the checker needs none of them) for tool calls, and the
# jsonschema package for structured output. Installs both into a venv under target/.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${REDLINE_VENV_DIR:-target/venv-grading}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check 'jsonschema>=4.18,<5'
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps 'bfcl-eval==2026.3.23'
cargo build --release --quiet
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$venv/bin/python" scripts/grading_check.py ./target/release/redline "$work"
