"""What every CLI command group shares: the consoles, the per-invocation state, errors as one
line with an exit status, and the client for a server when one is configured."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, get_args, get_origin

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperOption

from qexport.config import Settings
from qexport.domain.exports import Requester
from qexport.domain.failures import InvalidRequestError, QExportError

if TYPE_CHECKING:
    from qexport.cli.client import ApiError, Client
    from qexport.cli.remote import QExportClient
    from qexport.container import Container

# No console markup: what is printed holds names, SQL and messages people typed, where
# `[by SERIES]` would vanish and `[/x]` would crash the command.
out = Console(markup=False)
err = Console(stderr=True, markup=False)


@dataclass
class State:
    settings: Settings
    requester: Requester
    # Both set: the client commands talk to that server instead of the local database.
    url: str | None = None
    token: str | None = None
    # False when no data directory was named or found (cli/home.py): a command that would
    # keep its files there refuses, rather than make one wherever it runs (init and demo
    # make it).
    data_dir_found: bool = True
    # --as EMAIL: the member the local commands act as, looked up when the database opens.
    act_as: str | None = None
    _deps: Container | None = None

    def local_settings(self, *, create: bool = False) -> Settings:
        """The settings of a command that opens the local installation: refused when they
        keep files in a data directory that was neither named nor found, unless the command
        makes one (`create`)."""
        if not (create or self.data_dir_found) and self.settings.uses_data_dir():
            fail_input(
                f"no {self.settings.data_dir.name} folder in {Path.cwd()} or any folder"
                " above it: run `qexport init --email EMAIL` (or `qexport demo`) to make"
                " one, run the command where it is, or name it with QEXPORT_DATA_DIR"
            )
        return self.settings

    def deps(self, *, create: bool = False) -> Container:
        """The local installation; with `create`, made first if there is none."""
        if self._deps is None:
            from qexport import bootstrap  # the adapters, only for a command that uses them

            self._deps = bootstrap.build(self.local_settings(create=create))
            if self.act_as is not None:
                self.requester = _member_named(self._deps, self.act_as, self.requester)
        return self._deps


def _member_named(deps: Container, email: str, requester: Requester) -> Requester:
    """The requester that `--as EMAIL` names, in the requester's workspace."""
    from qexport.services.accounts import find_user

    try:
        user = find_user(deps.accounts, email)
    except QExportError as exc:
        fail_input(
            f"--as {email}: {exc} (qexport members list --workspace {requester.workspace_id})"
        )
    return Requester(user.id, requester.workspace_id)


BAD_INPUT = 2  # the exit status for input refused before anything happened


def _value_kind(option: TyperOption, ctx: Any) -> str | None:
    """What `--help` shows after an option: the kind of value it takes, as its annotation (or
    its metavar) says, repeatable ones by their element (`--param <str>`, its help says it
    repeats); nothing for a flag, which takes no value (`--json`, `--wait/--no-wait`)."""
    if option.is_flag or option.count:
        return None
    if option.metavar is not None:
        return option.metavar
    annotation: Any = option.type_descriptor.annotation
    if option.multiple and get_origin(annotation) is list:
        (element,) = get_args(annotation)
        return f"<{option._bare_type(element)}>"
    return _TYPER_VALUE_KIND(option, ctx)


# Every option of every command is shown by this one method: it is where the kinds are
# derived, so it is where they are put right (typer shows `<bool>` for a flag and
# `<list[str]>` for a repeatable option).
_TYPER_VALUE_KIND = TyperOption.display_type_rich
TyperOption.display_type_rich = _value_kind  # type: ignore[method-assign,assignment]


def say_error(message: str) -> None:
    """One `error: ...` line on stderr."""
    err.print(Text.assemble(("error:", "bold red"), f" {message}"), highlight=False, soft_wrap=True)


def fail(message: str, code: int = 1) -> NoReturn:
    say_error(message)
    raise typer.Exit(code)


def fail_input(message: str) -> NoReturn:
    """Refuse bad input: one line on stderr, exit status 2."""
    fail(message, BAD_INPUT)


def fail_problems(
    exc: InvalidRequestError, label: Callable[[InvalidRequestError], str]
) -> NoReturn:
    """Refuse bad input with every mistake found, one line each in the request's order (each
    led by `label(problem)`, e.g. the option at fault), exit status 2."""
    *lines, last = [f"{label(problem)}{problem}" for problem in exc.problems]
    for line in lines:
        say_error(line)
    fail_input(last)


def state(ctx: typer.Context) -> State:
    obj = ctx.obj
    assert isinstance(obj, State)
    return obj


def parse_kv(pairs: list[str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail_input(f"--param expects KEY=VALUE, got {pair!r}")
        values[key] = value
    return values


def remote(ctx: typer.Context) -> QExportClient | None:
    """The server client when QEXPORT_URL and QEXPORT_TOKEN (or --url, --token) are set."""
    st = state(ctx)
    if not st.url and not st.token:
        return None
    if not (st.url and st.token):
        fail_input("talking to a server needs both QEXPORT_URL and QEXPORT_TOKEN (--url, --token)")
    from qexport.cli.remote import QExportClient

    return QExportClient(st.url, st.token)


def client_of(ctx: typer.Context) -> Client:
    """The client a command talks to: the server's when QEXPORT_URL and QEXPORT_TOKEN (or
    --url, --token) are set, else the local database's, acting as the member --user names
    (`qexport.services.accounts.local_principal`). The same answers and refusals either way."""
    found = remote(ctx)
    if found is not None:
        return found
    from qexport.cli.local import LocalClient
    from qexport.services.accounts import local_principal

    st, deps = local_deps(ctx)
    member = deps.accounts.role_of(st.requester.workspace_id, st.requester.user_id) is not None
    return LocalClient(deps, local_principal(deps.accounts, st.requester), member=member)


@contextlib.contextmanager
def server_errors(client_error_code: int = 1) -> Iterator[None]:
    """A server's refusal as one line with its code; `client_error_code` for 4xx answers."""
    from qexport.cli.client import ApiError

    try:
        yield
    except ApiError as exc:
        # A bad token or a forbidden action is not a mistake in the values given: 1.
        refused = 400 <= exc.status < 500 and exc.status not in (401, 403)
        fail_api(exc, client_error_code if refused else 1)


@contextlib.contextmanager
def server_refusals(bad_input: Collection[int] = (422,)) -> Iterator[None]:
    """A server's refusal as one line with its code: 2 when it refused the values given
    (422, or the other `bad_input` statuses), as the same values are refused locally; 1 for
    any other (a bad token, someone else's thing, the server down)."""
    from qexport.cli.client import ApiError

    try:
        yield
    except ApiError as exc:
        fail_api(exc, BAD_INPUT if exc.status in bad_input else 1)


def fail_api(
    exc: ApiError, code: int, label: Callable[[str | None], str] | None = None
) -> NoReturn:
    """A refusal: one line, or one line per mistake when several were found. With `label`,
    each line is led by `label(field)` (the option that gave the field at fault, say); else
    several mistakes are led by their fields."""
    lead = label or (lambda field: f"{field}: " if field else "")
    if len(exc.mistakes) > 1:
        *lines, (last_lead, last) = [(lead(f), m) for f, m in exc.mistakes]
        for led, line in lines:
            say_error(f"{led}{line}")
        fail(f"{last_lead}{last} ({exc.code})", code)
    if label is not None:
        fail(f"{label(exc.field)}{exc}", code)
    fail(str(exc), code)


def check_local_requester(deps: Container, requester: Requester) -> None:
    """In a workspace that has accounts, the local requester must be one of its members and
    not disabled. Every local requester action checks this first, so that a removed member
    can neither request exports nor see, wait for, download or cancel the ones they had."""
    accounts = deps.accounts
    workspace, user_id = requester.workspace_id, requester.user_id
    if not accounts.workspace_exists(workspace):
        return
    user = accounts.get_user(user_id)
    if user is None or user.disabled or accounts.role_of(workspace, user_id) is None:
        fail_input(
            f"user {user_id!r} is not a member of workspace {workspace!r}, which has accounts;"
            f" pass --user with a member's id (qexport members list --workspace {workspace})",
        )


def local_deps(ctx: typer.Context) -> tuple[State, Container]:
    """The state and the local database for a requester action, the requester checked."""
    st = state(ctx)
    deps = st.deps()
    check_local_requester(deps, st.requester)
    return st, deps


def resolve_id(
    ctx: typer.Context,
    ref: str,
    kind: str,
    starting: Callable[[Client, str], list[tuple[str, str]]],
    *,
    unknown: str,
    unknown_exit: int = 1,
) -> str:
    """The full id of the `kind` (export, schedule, link...) that `ref` names: its id, or a
    start of it (at least 4 characters) that no other the caller may see shares;
    `starting(client, prefix)` gives those the caller sees whose id starts so, as (id, what
    it is) pairs, from the local database or the server alike. Like git, an ambiguous start is
    refused with the candidates (exit 2), and an unknown one with `unknown` (`unknown_exit`,
    as the command exits for an unknown whole id); a whole id, or nothing like one, is left to
    the command's own lookup, which says which."""
    from qexport.services.exports import ambiguous_message, id_prefix_of

    ref = ref.strip()
    try:
        prefix = id_prefix_of(ref, kind)
    except InvalidRequestError as exc:
        fail_input(exc.detail)
    if prefix is None:
        return ref
    with client_of(ctx) as client, server_refusals():
        found = starting(client, prefix)
    if not found:
        fail(unknown, unknown_exit)
    if len(found) > 1:
        fail_input(ambiguous_message(ref, found, kind=kind))
    return found[0][0]


def resolve_export_id(ctx: typer.Context, ref: str | None) -> str:
    """The full id of the export `ref` names (`resolve_id`: its id or a start of it among
    the exports the caller may see); none at all says where ids are found (exit 2)."""
    if ref is None or not ref.strip():
        fail_input(
            "which export? give its id or the start of it; `qexport exports list` shows them"
        )
    return resolve_id(ctx, ref, "export", _exports_starting, unknown=f"no export {ref.strip()!r}")


def _exports_starting(client: Client, prefix: str) -> list[tuple[str, str]]:
    from qexport.services.exports import MAX_CANDIDATES

    found = client.exports_starting(prefix, MAX_CANDIDATES + 1)
    return [(str(view["id"]), str(view["subject"]["name"])) for view in found]
