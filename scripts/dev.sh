#!/usr/bin/env bash
# Set up a virtual environment from the lock files and run qexport's demo, tests or linters.
#   scripts/dev.sh demo [qexport demo options]   runtime packages, then `qexport demo`
#   scripts/dev.sh test [pytest options]         runtime + dev packages, then the whole suite
#   scripts/dev.sh lint                          ruff (lint + format check) and mypy
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${QEXPORT_VENV:-.venv}
PY=${PYTHON:-python3}

if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "qexport needs Python >= 3.11 (found: $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
    exit 2
fi

setup() {
    if [ ! -x "$VENV/bin/python" ]; then
        "$PY" -m venv "$VENV"
    fi
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$1"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e . \
        2>/dev/null || "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -e .
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
    demo)
        setup requirements.lock
        exec "$VENV/bin/qexport" demo "$@"
        ;;
    test)
        setup requirements-dev.lock
        # The browser tests inject axe-core (pinned by tests/web/axe/package-lock.json).
        if command -v npm >/dev/null && [ ! -f tests/web/axe/node_modules/axe-core/axe.min.js ]; then
            npm ci --prefix tests/web/axe --no-audit --no-fund --silent
        fi
        # One pytest worker per core (pytest-xdist); QEXPORT_TEST_WORKERS=0 runs in this process.
        # worksteal: a worker that runs out takes tests queued on the other (the slow e2e ones
        # otherwise pile up on one while the other idles).
        exec "$VENV/bin/python" -m pytest -n "${QEXPORT_TEST_WORKERS:-auto}" --dist worksteal "$@"
        ;;
    lint)
        setup requirements-dev.lock
        "$VENV/bin/ruff" check src tests bench
        "$VENV/bin/ruff" format --check src tests bench
        "$VENV/bin/mypy"
        ;;
    lock)
        "$VENV/bin/python" -m pip install --quiet uv
        "$VENV/bin/uv" pip compile pyproject.toml --python-version 3.11 --quiet -o requirements.lock
        "$VENV/bin/uv" pip compile pyproject.toml --extra dev --python-version 3.11 --quiet -o requirements-dev.lock
        ;;
    *)
        echo "usage: scripts/dev.sh demo|test|lint|lock [args...]" >&2
        exit 2
        ;;
esac
