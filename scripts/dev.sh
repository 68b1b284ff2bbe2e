#!/usr/bin/env bash
# Set up a virtual environment from the lock files and run qexport's demo, tests or linters.
#   scripts/dev.sh demo [qexport demo options]   runtime packages, then `qexport demo`
#   scripts/dev.sh test [pytest options]         runtime + dev packages, then the whole suite
#   scripts/dev.sh lint                          ruff (lint + format check) and mypy
# `test` also installs the system packages the tests need (scripts/system-packages.sh) when
# it may: as root, or with sudo without a password (QEXPORT_INSTALL_SYSTEM=no: never). What
# it cannot install, or a driver that does not build (mysqlclient), leaves out the tests that
# need it, named with the command that adds it at the start and at the end. With CI set
# nothing is left out: .ci/run has installed everything and a failed build stops the run.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${QEXPORT_VENV:-.venv}
PY=${PYTHON:-python3}

if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "qexport needs Python >= 3.11 (found: $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
    exit 2
fi

pip_install() {
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
}

setup() {
    if [ ! -x "$VENV/bin/python" ]; then
        "$PY" -m venv "$VENV"
    fi
    if [ -n "${1:-}" ]; then
        pip_install -r "$1"
    fi
    pip_install --no-deps --no-build-isolation -e . 2>/dev/null || pip_install --no-deps -e .
}

# `lock_entries keep|drop LOCK NAME...`: the lock file's entries for the packages named (each
# pin with its indented --hash and comment lines), or the lock file without them.
lock_entries() {
    local mode=$1 lock=$2
    shift 2
    awk -v mode="$mode" -v names=" $* " '
        /^[^ \t#-]/ {
            name = tolower($0)
            sub(/[ \t=<>!~;@[].*/, "", name)
            gsub(/[-_.]+/, "-", name)
            chosen = index(names, " " name " ") > 0
        }
        /^[#-]/ { print; next }
        (mode == "keep") == chosen { print }
    ' "$lock"
}

# What `test` leaves out: need (scripts/system-packages.sh) -> why ("": its system packages
# are missing).
declare -A LEFT_OUT=()

# `test` outside CI: set up what it can, run the tests of the rest, say what was left out.
run_tests() {
    # shellcheck source=scripts/system-packages.sh
    . scripts/system-packages.sh
    install_system_needs
    left_out_summary >&2
    install_python_leaving_out
    install_axe
    pytest_arguments "$@"
    local status=0
    run_pytest "${PYTEST_ARGUMENTS[@]}" || status=$?
    left_out_summary >&2
    return "$status"
}

# The system packages that are missing, installed where this user may; the rest left out.
install_system_needs() {
    local need missing=()
    mapfile -t missing < <(qx_missing)
    if [ ${#missing[@]} -gt 0 ] && qx_can_install; then
        qx_install "${missing[@]}" || echo "qexport: apt-get failed; going on without" >&2
        mapfile -t missing < <(qx_missing)
    fi
    for need in "${missing[@]}"; do
        LEFT_OUT[$need]=""
    done
}

# The lock file without the packages that build against system packages (mysqlclient), then
# each of those on its own where its system packages are there: a failed build leaves out its
# need's tests instead of stopping here.
install_python_leaving_out() {
    local need optional=()
    WORK=$(mktemp -d) # global: the EXIT trap runs after this function has returned
    trap 'rm -rf "$WORK"' EXIT
    for need in "${QX_NEEDS[@]}"; do
        # shellcheck disable=SC2206 # a list of names
        optional+=(${QX_PYTHON[$need]})
    done
    lock_entries drop requirements-dev.lock "${optional[@]}" >"$WORK/requirements.txt"
    setup "$WORK/requirements.txt"
    for need in "${QX_NEEDS[@]}"; do
        if [ -n "${QX_PYTHON[$need]}" ] && [ ! -v "LEFT_OUT[$need]" ]; then
            # shellcheck disable=SC2086 # a list of names
            lock_entries keep requirements-dev.lock ${QX_PYTHON[$need]} >"$WORK/$need.txt"
            if ! pip_install -r "$WORK/$need.txt"; then
                LEFT_OUT[$need]="${QX_PYTHON[$need]} did not build; pip's error is above"
                echo "qexport: leaving out the ${QX_WHAT[$need]}: ${LEFT_OUT[$need]}" >&2
            fi
        fi
    done
}

# The browser tests inject axe-core (pinned by tests/web/axe/package-lock.json).
install_axe() {
    if [ ! -v "LEFT_OUT[browser]" ] && [ ! -f tests/web/axe/node_modules/axe-core/axe.min.js ] \
        && ! npm ci --prefix tests/web/axe --no-audit --no-fund --loglevel=error; then
        LEFT_OUT[browser]="npm ci --prefix tests/web/axe failed; npm's error is above"
    fi
}

# PYTEST_ARGUMENTS: the caller's, with `-m "not mysql and ..."` (joined to the caller's own
# -m) and `--deselect` for test ids, for what is left out.
pytest_arguments() {
    local need markers=() deselect=() given=() asked="" expression=""
    for need in "${QX_NEEDS[@]}"; do
        if [ -v "LEFT_OUT[$need]" ]; then
            if [[ ${QX_TESTS[$need]} == */* ]]; then
                deselect+=(--deselect "${QX_TESTS[$need]}")
            else
                markers+=("not ${QX_TESTS[$need]}")
            fi
        fi
    done
    while [ $# -gt 0 ]; do
        case "$1" in
            -m) asked=${2:-}; shift; [ $# -gt 0 ] && shift ;;
            -m*) asked=${1#-m}; shift ;;
            *) given+=("$1"); shift ;;
        esac
    done
    expression=$asked
    if [ ${#markers[@]} -gt 0 ]; then
        expression=$(printf ' and %s' "${markers[@]}")
        expression=${expression# and }
        [ -z "$asked" ] || expression="($asked) and $expression"
        echo "qexport: pytest -m \"$expression\"${deselect[*]:+ ${deselect[*]}}" >&2
    elif [ ${#deselect[@]} -gt 0 ]; then
        echo "qexport: pytest ${deselect[*]}" >&2
    fi
    PYTEST_ARGUMENTS=()
    if [ -n "$expression" ]; then
        PYTEST_ARGUMENTS=(-m "$expression")
    fi
    PYTEST_ARGUMENTS+=("${deselect[@]}" "${given[@]}")
}

# What `test` leaves out, one line a need (qx_summary); nothing when nothing is.
left_out_summary() {
    local need arguments=()
    for need in "${QX_NEEDS[@]}"; do
        if [ -v "LEFT_OUT[$need]" ]; then
            arguments+=("$need${LEFT_OUT[$need]:+=${LEFT_OUT[$need]}}")
        fi
    done
    [ ${#arguments[@]} -eq 0 ] || qx_summary "${arguments[@]}"
}

# One pytest worker per core (pytest-xdist); QEXPORT_TEST_WORKERS=0 runs in this process.
# worksteal: a worker that runs out takes tests queued on the other (the slow e2e ones
# otherwise pile up on one while the other idles).
run_pytest() {
    "$VENV/bin/python" -m pytest -n "${QEXPORT_TEST_WORKERS:-auto}" --dist worksteal "$@"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
    demo)
        setup requirements.lock
        exec "$VENV/bin/qexport" demo "$@"
        ;;
    test)
        if [ -z "${CI:-}" ]; then
            run_tests "$@"
            exit
        fi
        setup requirements-dev.lock
        # The browser tests inject axe-core (pinned by tests/web/axe/package-lock.json).
        if command -v npm >/dev/null && [ ! -f tests/web/axe/node_modules/axe-core/axe.min.js ]; then
            npm ci --prefix tests/web/axe --no-audit --no-fund --silent
        fi
        run_pytest "$@"
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
