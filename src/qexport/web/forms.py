"""What the catalog's forms share: text areas read line by line, members written as email
addresses, and where on the form a refused value is shown."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Sequence

from qexport.domain.accounts import Principal, normalize_email
from qexport.domain.failures import ForbiddenError, InvalidRequestError
from qexport.domain.queries import Visibility
from qexport.ports import UserStore

GENERAL = "form"  # errors that belong to no one field, shown above the form
NOTICES = {
    "saved": "Saved.",
    "paused": "The schedule is paused: it makes no exports until it is resumed.",
    "resumed": "The schedule is resumed; its next run counts from now.",
    # pages/subscriptions.py
    "subscribed": "You are subscribed: each run's export is mailed to you too.",
    "unsubscribed": "You are unsubscribed: its runs are no longer mailed to you.",
    "query-deleted": "The query was deleted.",
    "report-deleted": "The report was deleted.",
    "schedule-deleted": "The schedule was deleted; it makes no more exports.",
}
_INDEXED = re.compile(r"^[.\[]?(\d+)\]?(?:\.|$)")


def require_writer(principal: Principal) -> None:
    """The API's rule for queries and reports: only editors and admins write them."""
    if not principal.can_write_queries:
        raise ForbiddenError("only editors and admins may create or change this")


def numbered_lines(text: str) -> list[tuple[int, str]]:
    """The non-blank lines of a text area, stripped, each with its line number (from 1)."""
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]


def field_of(exc: InvalidRequestError, fields: Iterable[str]) -> str:
    """The form field an error names (`parameters.0.default` -> `parameters`), or GENERAL."""
    named = exc.field or ""
    for name in fields:
        if named == name or named.startswith((f"{name}.", f"{name}[")):
            return name
    return GENERAL


def form_errors(
    exc: InvalidRequestError,
    fields: Iterable[str],
    words: Callable[[InvalidRequestError], str] | None = None,
) -> dict[str, str]:
    """Every problem of a refusal on the form field it names, in the order found (two on one
    field are shown together); `words` says a problem (default: its detail)."""
    fields = tuple(fields)
    found: dict[str, list[str]] = {}
    for problem in exc.problems:
        text = words(problem) if words else problem.detail
        found.setdefault(field_of(problem, fields), []).append(text)
    return {field: " ".join(texts) for field, texts in found.items()}


def on_line(exc: InvalidRequestError, prefix: str, numbers: Sequence[int]) -> str:
    """The error's words, led by the line it is about when its field indexes a list of lines
    (`sections.2.heading` with `numbers[2] == 4` -> `Line 4: ...`)."""
    named = exc.field or ""
    found = _INDEXED.match(named.removeprefix(prefix)) if named.startswith(prefix) else None
    if found is None or int(found[1]) >= len(numbers):
        return exc.detail
    return f"Line {numbers[int(found[1])]}: {exc.detail}"


def visibility_of(text: str) -> Visibility:
    try:
        return Visibility(text)
    except ValueError:
        raise InvalidRequestError(
            "choose who may read it: the workspace or listed members", field="visibility"
        ) from None


def member_ids(accounts: UserStore, text: str) -> frozenset[str]:
    """One member per line, as an email address or a user id; an address no user has is kept as
    written, for the service to refuse as not a member of the workspace."""
    found: set[str] = set()
    for _, line in numbered_lines(text):
        user = None
        if "@" in line:
            try:
                user = accounts.find_user(normalize_email(line))
            except ValueError:
                user = None
        found.add(user.id if user else line)
    return frozenset(found)


def member_lines(accounts: UserStore, ids: Collection[str]) -> str:
    """Members as the form shows them: their email addresses, one per line."""
    return "\n".join(sorted(email_of(accounts, i) for i in ids))


def email_of(accounts: UserStore, user_id: str | None) -> str:
    if user_id is None:
        return ""
    user = accounts.get_user(user_id)
    return user.email if user else user_id
