#!/usr/bin/env bash
# Set everything up on a fresh machine and run every test: Rust (unit, integration,
# validation, property tests) and Python (pytest, including CLI and reproduction checks).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo test (release: the validation tests simulate minutes of traffic)"
cargo test --workspace --release --locked
echo "== pytest"
python -m pytest -q
