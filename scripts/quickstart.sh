#!/usr/bin/env bash
# Set everything up on a fresh machine and run the built-in showcase scenario.
# Needs: Linux, Rust >= 1.88 (rustup), a C compiler, Python >= 3.11 with venv.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== setting up .venv (first time: builds the Rust engine, about 1-2 minutes)"
ASYMLINK_EXTRAS=${ASYMLINK_EXTRAS-} . scripts/env.sh
echo "== running the showcase"
asymlink run --example showcase --out out/showcase
echo
echo "Results, figures and summary.md are in out/showcase/"
