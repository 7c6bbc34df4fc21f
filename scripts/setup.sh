#!/usr/bin/env bash
# Sets up .venv with everything the project needs (CPU torch first, so no CUDA build is pulled).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q torch==2.13.0
# every extra but pisa (a compiled engine; its tests skip without it): the page, dump reading and plots, Ray,
# whose tests of sharded builds and search on a local Ray cluster run in CI, and the docs, whose site CI builds
# with warnings as errors (tests/test_docs_site.py)
.venv/bin/pip install -q -e '.[test,app,wiki,plot,ray,docs]'
