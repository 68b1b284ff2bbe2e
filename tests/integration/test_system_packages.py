"""scripts/system-packages.sh, the one list of what the tests need from the system: which
needs it finds missing on a machine, and the summary scripts/dev.sh prints of the tests it
then leaves out, with the command that adds them. Each machine here is a PATH of stub commands
and a folder standing for the system's root (QEXPORT_SYSTEM_ROOT)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "scripts" / "system-packages.sh"
SUDO = "" if os.geteuid() == 0 else "sudo "  # root is told to run apt-get itself
MYSQL = "mariadb-server libmariadb-dev pkg-config"
EVERY_COMMAND = ("pkg-config", "npm", "java", "soffice", "pdftoppm")
EVERY_FILE = ("usr/sbin/mariadbd", "usr/bin/chromium")


def _machine(
    tmp_path: Path, commands: tuple[str, ...] = (), files: tuple[str, ...] = ()
) -> dict[str, str]:
    """The environment of a machine with only `commands` on PATH (stubs that succeed, so
    `pkg-config --exists` finds anything) and only `files` under its root."""
    bin_dir, root = tmp_path / "bin", tmp_path / "root"
    bin_dir.mkdir()
    root.mkdir()
    for name in commands:
        stub = bin_dir / name
        stub.write_text("#!/bin/sh\nexit 0\n")
        stub.chmod(0o755)
    for name in files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
        path.chmod(0o755)
    return {"PATH": str(bin_dir), "QEXPORT_SYSTEM_ROOT": str(root), "HOME": str(tmp_path)}


def _run(env: dict[str, str], action: str) -> list[str]:
    bash = shutil.which("bash")
    assert bash is not None
    done = subprocess.run(
        [bash, str(SCRIPT), action], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.splitlines()


@pytest.mark.parametrize(
    ("commands", "files"),
    [
        (tuple(c for c in EVERY_COMMAND if c != "pkg-config"), EVERY_FILE),
        (EVERY_COMMAND, ("usr/bin/chromium",)),
    ],
    ids=["no pkg-config", "no mariadbd"],
)
def test_without_pkg_config_or_mariadbd_the_mysql_tests_are_left_out(
    tmp_path: Path, commands: tuple[str, ...], files: tuple[str, ...]
) -> None:
    """A machine with everything but pkg-config (mysqlclient cannot build) or MariaDB's
    server: only the mysql tests are left out, and the summary gives the one command that
    adds all three packages they need."""
    env = _machine(tmp_path, commands, files)
    assert _run(env, "missing") == ["mysql"]
    assert _run(env, "summary") == [
        f"left out: mysql tests (needs {MYSQL}): {SUDO}apt-get install -y {MYSQL}"
    ]


def test_a_bare_machine_leaves_out_every_need_and_says_how_to_add_them_all(
    tmp_path: Path,
) -> None:
    """No pkg-config, mariadbd, Chromium, npm, Java, LibreOffice or poppler: each need is
    named with its tests and packages, then one command installs every package once."""
    summary = _run(_machine(tmp_path), "summary")
    assert summary[:-1] == [
        f"left out: mysql tests (needs {MYSQL}): {SUDO}apt-get install -y {MYSQL}",
        f"left out: browser tests (needs chromium npm): {SUDO}apt-get install -y chromium npm",
        "left out: spark tests (needs openjdk-17-jre-headless):"
        f" {SUDO}apt-get install -y openjdk-17-jre-headless",
        "left out: LibreOffice xlsx test (needs libreoffice-calc-nogui):"
        f" {SUDO}apt-get install -y libreoffice-calc-nogui",
        f"left out: PDF rendering test (needs poppler-utils): {SUDO}apt-get install -y"
        " poppler-utils",
    ]
    assert summary[-1] == (
        f"add them all: {SUDO}apt-get install -y {MYSQL} chromium npm openjdk-17-jre-headless"
        " libreoffice-calc-nogui poppler-utils"
    )


def test_a_machine_with_everything_leaves_nothing_out(tmp_path: Path) -> None:
    """Every command and file there: nothing missing, no summary at all."""
    env = _machine(tmp_path, EVERY_COMMAND, EVERY_FILE)
    assert _run(env, "missing") == []
    assert _run(env, "summary") == []


def test_the_untrusted_languages_follow_the_local_postgresql_s_newest_major(
    tmp_path: Path,
) -> None:
    """With local PostgreSQL 9 and 16 configured and no plperlu or plpython3u, the packages
    named are those of 16 (not 9, as a sort by text would pick); once 16's extensions are
    there, nothing is missing."""
    files = (*EVERY_FILE, "etc/postgresql/9/main/postgresql.conf")
    env = _machine(tmp_path, EVERY_COMMAND, (*files, "etc/postgresql/16/main/postgresql.conf"))
    packages = "postgresql-plperl-16 postgresql-plpython3-16"
    assert _run(env, "summary") == [
        f"left out: untrusted-language role test (needs {packages}):"
        f" {SUDO}apt-get install -y {packages}"
    ]
    extensions = Path(env["QEXPORT_SYSTEM_ROOT"]) / "usr/share/postgresql/16/extension"
    extensions.mkdir(parents=True)
    (extensions / "plperlu.control").write_text("")
    (extensions / "plpython3u.control").write_text("")
    assert _run(env, "missing") == []


def _apt_get(env: dict[str, str], tmp_path: Path, provides: tuple[str, ...]) -> Path:
    """Stand-ins for apt-get, which logs its calls and, asked to install, puts `provides` on
    PATH, and for sudo and env, which run what follows; the log's path."""
    bin_dir, log = Path(env["PATH"]), tmp_path / "apt-get.log"
    stubs = {
        "apt-get": (
            f'echo "$DEBIAN_FRONTEND $*" >> {log}\n'
            f'[ "$1" = install ] && for c in {" ".join(provides)}; do\n'
            f'    printf "#!/bin/sh\\n" > {bin_dir}/$c; chmod +x {bin_dir}/$c\n'
            "done\nexit 0\n"
        ),
        "sudo": '[ "$1" = -n ] && shift\nexec "$@"\n',
        "chmod": f'exec {shutil.which("chmod")} "$@"\n',
        "env": f'exec {shutil.which("env")} "$@"\n',
    }
    for name, body in stubs.items():
        stub = bin_dir / name
        stub.write_text(f"#!/bin/sh\n{body}")
        stub.chmod(0o755)
    return log


@pytest.mark.parametrize(
    ("provides", "still_missing"),
    [(("java", "pdftoppm"), []), (("pdftoppm",), ["spark tests"])],
    ids=["both installed", "java still missing"],
)
def test_ci_installs_what_is_missing_at_once_and_fails_on_what_still_is(
    tmp_path: Path, provides: tuple[str, ...], still_missing: list[str]
) -> None:
    """`require` (.ci/run): one `apt-get update` and one non-interactive install of every
    missing need's packages; it fails, naming the tests, when a need is still unmet after."""
    commands = tuple(c for c in EVERY_COMMAND if c not in {"java", "pdftoppm"})
    env = _machine(tmp_path, commands, EVERY_FILE)
    log = _apt_get(env, tmp_path, provides)
    bash = shutil.which("bash")
    assert bash is not None
    done = subprocess.run(
        [bash, str(SCRIPT), "require"], env=env, capture_output=True, text=True, check=False
    )
    assert log.read_text().splitlines() == [
        "noninteractive update -qq",
        "noninteractive install -y -qq openjdk-17-jre-headless poppler-utils",
    ]
    assert done.returncode == (1 if still_missing else 0)
    left_out = [line for line in done.stderr.splitlines() if line.startswith("left out:")]
    assert [line.split(" (")[0].removeprefix("left out: ") for line in left_out] == still_missing
