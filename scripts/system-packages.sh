#!/usr/bin/env bash
# What the test suite needs from the system besides Python, in one table: for each need, how
# to tell it is there, the Debian/Ubuntu packages that provide it, and the tests that need it
# (a pytest marker, or test ids). scripts/dev.sh test installs what it can and leaves out the
# tests of the rest; .ci/run (CI) installs it all and stops if anything is still missing.
#
# Sourced, it defines the table and the qx_* functions; run, it does one thing:
#   scripts/system-packages.sh missing   the needs not met, one name a line
#   scripts/system-packages.sh summary   a "left out: ..." line for each need not met
#   scripts/system-packages.sh require   install what is missing, then fail naming any need
#                                        still not met (CI)
# QEXPORT_SYSTEM_ROOT (default /) is where fixed paths (/usr/sbin/mariadbd, /usr/bin/chromium,
# /etc/postgresql) are looked for: the tests point it at a folder of their own. Commands are
# looked for on PATH, as the tests look for them.

QX_ROOT=${QEXPORT_SYSTEM_ROOT:-}
QX_NEEDS=()
declare -gA QX_WHAT=() QX_TESTS=() QX_DEBIAN=() QX_PYTHON=()

# qx_need NAME WHAT TESTS DEBIAN [PYTHON]: TESTS is a pytest marker, or test ids (with a "/");
# PYTHON names the lock file's packages that build against DEBIAN (left out of the venv
# without it). Each need has a qx_has_NAME check beside it.
# shellcheck disable=SC2034 # QX_TESTS and QX_PYTHON are read by scripts/dev.sh
qx_need() {
    QX_NEEDS+=("$1")
    QX_WHAT[$1]=$2
    QX_TESTS[$1]=$3
    QX_DEBIAN[$1]=$4
    QX_PYTHON[$1]=${5:-}
}

# The MySQL/MariaDB tests start Debian's mariadbd (tests/support/mariadb.py); their driver,
# mysqlclient, builds against libmariadb-dev, which it finds with pkg-config.
qx_need mysql "mysql tests" mysql "mariadb-server libmariadb-dev pkg-config" mysqlclient
qx_has_mysql() {
    [ -x "$QX_ROOT/usr/sbin/mariadbd" ] && pkg-config --exists libmariadb 2>/dev/null
}

# The web UI's browser tests drive Debian's Chromium (never a downloaded browser) and inject
# axe-core from npm (`npm ci --prefix tests/web/axe`, run by scripts/dev.sh test).
qx_need browser "browser tests" browser "chromium npm"
qx_has_browser() { [ -x "$QX_ROOT/usr/bin/chromium" ] && command -v npm >/dev/null; }

# The Spark Connect tests start pyspark's Spark Connect server, which runs on Java 17.
qx_need spark "spark tests" spark "openjdk-17-jre-headless"
qx_has_spark() { command -v java >/dev/null; }

# An exported xlsx is read back by LibreOffice Calc.
qx_need xlsx "LibreOffice xlsx test" tests/integration/test_xlsx_libreoffice.py \
    "libreoffice-calc-nogui"
qx_has_xlsx() { command -v soffice >/dev/null; }

# The report tests rasterise PDF pages with poppler's pdftoppm.
qx_need pdf "PDF rendering test" \
    tests/integration/test_report_render.py::test_pdf_pages_render_to_png "poppler-utils"
qx_has_pdf() { command -v pdftoppm >/dev/null; }

# The role check's tests create functions in PostgreSQL's untrusted languages (plpython3u,
# plperlu); their packages follow the local server's major version. Without a local server
# (a remote one, or none) there is nothing to install here.
qx_pg_major() {
    local dir version major=""
    for dir in "$QX_ROOT"/etc/postgresql/*/; do
        version=${dir%/}
        version=${version##*/}
        [[ $version =~ ^[0-9]+$ ]] || continue
        if [ -z "$major" ] || [ "$version" -gt "$major" ]; then major=$version; fi
    done
    [ -n "$major" ] && echo "$major"
}
if QX_PG_MAJOR=$(qx_pg_major); then
    qx_need untrusted "untrusted-language role test" \
        tests/integration/test_postgres_source_roles.py::test_a_function_in_an_untrusted_language_is_found \
        "postgresql-plperl-$QX_PG_MAJOR postgresql-plpython3-$QX_PG_MAJOR"
fi
qx_has_untrusted() {
    local extensions="$QX_ROOT/usr/share/postgresql/$QX_PG_MAJOR/extension"
    [ -e "$extensions/plperlu.control" ] && [ -e "$extensions/plpython3u.control" ]
}

# The needs not met, one name a line.
qx_missing() {
    local need
    for need in "${QX_NEEDS[@]}"; do
        "qx_has_$need" || echo "$need"
    done
}

# The Debian packages of the needs named, each once, on one line.
qx_packages() {
    local need package seen=" " out=()
    for need in "$@"; do
        for package in ${QX_DEBIAN[$need]}; do
            [[ $seen == *" $package "* ]] && continue
            seen+="$package "
            out+=("$package")
        done
    done
    echo "${out[*]}"
}

# Whether this user may install Debian packages: root, or sudo without a password (and not
# turned off with QEXPORT_INSTALL_SYSTEM=no). Sets QX_SUDO for qx_install.
qx_can_install() {
    [ "${QEXPORT_INSTALL_SYSTEM:-yes}" != no ] && command -v apt-get >/dev/null || return 1
    if [ "$EUID" -eq 0 ]; then
        QX_SUDO=""
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        QX_SUDO="sudo -n"
    else
        return 1
    fi
}

# Install the packages of the needs named: one `apt-get update`, one `apt-get install`.
qx_install() {
    [ $# -gt 0 ] || return 0
    local packages
    packages=$(qx_packages "$@")
    echo "qexport: installing for the tests: $packages" >&2
    # shellcheck disable=SC2086 # QX_SUDO and the package list are words
    $QX_SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
        && $QX_SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages
}

# The command that installs the packages of the needs named, for this user.
qx_install_command() {
    local sudo="sudo "
    [ "$EUID" -eq 0 ] && sudo=""
    echo "${sudo}apt-get install -y $(qx_packages "$@")"
}

# One "left out: ..." line per argument, NAME (its packages are missing) or NAME=REASON, then,
# for several needs of missing packages, the one command that adds them all.
qx_summary() {
    local arg need reason unmet=()
    for arg in "$@"; do
        need=${arg%%=*}
        if [[ $arg == *=* ]]; then
            reason=${arg#*=}
            echo "left out: ${QX_WHAT[$need]} ($reason)"
        else
            unmet+=("$need")
            echo "left out: ${QX_WHAT[$need]} (needs ${QX_DEBIAN[$need]}): $(qx_install_command "$need")"
        fi
    done
    if [ ${#unmet[@]} -gt 1 ]; then
        echo "add them all: $(qx_install_command "${unmet[@]}")"
    fi
}

# CI: install what is missing, then fail naming whatever still is.
qx_require() {
    local missing=()
    mapfile -t missing < <(qx_missing)
    if [ ${#missing[@]} -gt 0 ]; then
        if ! qx_can_install; then
            echo "qexport: not installing Debian packages (neither root nor sudo -n, or QEXPORT_INSTALL_SYSTEM=no)" >&2
        elif ! qx_install "${missing[@]}"; then
            echo "qexport: apt-get failed" >&2
        fi
        mapfile -t missing < <(qx_missing)
    fi
    if [ ${#missing[@]} -gt 0 ]; then
        echo "qexport: CI needs every system package the tests use; still missing:" >&2
        qx_summary "${missing[@]}" >&2
        return 1
    fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    case "${1:-}" in
        missing) qx_missing ;;
        summary)
            mapfile -t unmet < <(qx_missing)
            qx_summary "${unmet[@]}"
            ;;
        require) qx_require ;;
        *)
            echo "usage: scripts/system-packages.sh missing|summary|require" >&2
            exit 2
            ;;
    esac
fi
