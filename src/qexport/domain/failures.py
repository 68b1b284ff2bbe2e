"""Failure codes (a public contract: codes are added, never renamed) and the error root."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum

from qexport.domain.humanize import binary_size

MAX_DETAIL_CHARS = 500


class FailureCode(StrEnum):
    ACCESS_LOST = "access_lost"
    QUERY_INVALID = "query_invalid"
    QUERY_TIMEOUT = "query_timeout"
    LIMIT_EXCEEDED = "limit_exceeded"
    RENDER_FAILED = "render_failed"
    CANCELLED = "cancelled"
    SOURCE_UNAVAILABLE = "source_unavailable"
    STORAGE_UNAVAILABLE = "storage_unavailable"
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"
    INTERNAL = "internal"
    # Deliveries only: the recipient's address is refused by the egress policy.
    DESTINATION_REFUSED = "destination_refused"

    @property
    def retryable(self) -> bool:
        return self in _RETRYABLE

    @property
    def reason(self) -> str:
        """What the failure means to a person; the record's detail follows it."""
        return FAILURE_REASONS.get(self, "The export failed.")


_RETRYABLE = frozenset({FailureCode.SOURCE_UNAVAILABLE, FailureCode.STORAGE_UNAVAILABLE})


def bounded_detail(text: str) -> str:
    """Make a failure detail safe to store: one paragraph, no traceback, at most 500 chars."""
    text = text.split("\nTraceback", 1)[0]
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) > MAX_DETAIL_CHARS:
        text = text[: MAX_DETAIL_CHARS - 1] + "…"
    return text


# ---------------------------------------------------------------- the detail people read

# Read-time, not write-time: the record's detail is also what its `failed` event holds (the
# event is written from the row, in the same transaction), so the engine's own words stay in
# the history while every reader shows this; records written before it read clean too.
READABLE_MAX_CHARS = 280  # about two lines of a page; a longer headline is cut
# DuckDB and PostgreSQL quote the statement and point under the mistake: "LINE 2: FROM t" and
# a line of carets. Stored details are one paragraph (bounded_detail), so the caret line may
# follow on the same line; a detail cut at 500 characters may have lost the carets.
_CARET_ART = re.compile(r"\s*\bLINE \d+:(?:[^\n]*\n\s*\^+[^\n]*|.*?\s\^+(?=\s|$)|.*$)", re.DOTALL)
_POSITION = re.compile(r"\s*\((line \d+, column \d+)\)\s*$")
# Sentences: split after . ! ? (or a "Label:" list) when the next one starts like a sentence.
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])|\s+(?=Candidate \w+:)")
# What people cannot act on: the engine's catalogue and settings (DuckDB suggests "pg_tables"
# for any unknown table), and qexport's own wrapping of the statement.
_INTERNAL = re.compile(
    r"\b(?:pg_\w+|duckdb_\w+|sqlite_\w+|information_schema|qexport_\w+)\b|\bSET \w+\s*=|PRAGMA ",
    re.IGNORECASE,
)
HINT_MAX_CHARS = 120  # a hint longer than this is a list (DuckDB's candidate functions)


def readable_detail(detail: str | None) -> str:
    """A failure's detail as people read it (pages, the API's `failure.detail`, the CLI,
    messages): no caret art, no suggestion naming the engine's internals, at most two
    sentences of at most READABLE_MAX_CHARS; the position in words is kept."""
    if not detail:
        return ""
    text = _CARET_ART.sub("", detail).strip()
    position = _POSITION.search(text)
    if position:
        text = text[: position.start()]
    sentences = [s.strip() for s in _SENTENCE.split(text) if s.strip()]
    if not sentences:
        return ""
    headline, *rest = sentences
    hints = [s for s in rest if len(s) <= HINT_MAX_CHARS and not _INTERNAL.search(s)]
    text = " ".join([headline, *hints[:1]])
    if position:
        text = f"{text} ({position.group(1)})"
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) > READABLE_MAX_CHARS:
        text = text[: READABLE_MAX_CHARS - 1].rstrip() + "…"
    return text


class QExportError(Exception):
    """Root of every qexport error; carries the failure code an export settles with."""

    code: FailureCode = FailureCode.INTERNAL

    def __init__(self, message: str, *, code: FailureCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def detail(self) -> str:
        return bounded_detail(str(self))


class AccessLostError(QExportError):
    code = FailureCode.ACCESS_LOST


class SourceLoginError(AccessLostError):
    """A data source refused qexport's credentials or database: a configuration error, so
    not retried (every kind of source that can tell a refusal from an outage says it so)."""


@dataclass(frozen=True)
class TextPosition:
    """Where in a query's text the source found the mistake: 1-based line and column."""

    line: int
    column: int

    @classmethod
    def at(cls, text: str, offset: int) -> TextPosition:
        """The position of the character at `offset` (0-based, clamped into `text`)."""
        offset = max(0, min(offset, len(text)))
        start = text.rfind("\n", 0, offset) + 1
        return cls(text.count("\n", 0, offset) + 1, offset - start + 1)

    def words(self) -> str:
        return f"line {self.line}, column {self.column}"


class QueryInvalidError(QExportError):
    code = FailureCode.QUERY_INVALID

    def __init__(self, message: str, *, position: TextPosition | None = None) -> None:
        super().__init__(message)
        self.position = position


class QueryTimeoutError(QExportError):
    code = FailureCode.QUERY_TIMEOUT


class LimitExceededError(QExportError):
    code = FailureCode.LIMIT_EXCEEDED


class MemoryRefusedError(LimitExceededError):
    """The process refused an allocation (a source's engine, Arrow, Python): the worker's
    backstop on its memory, or the machine's. The same statement asks as much the next time."""


# What an author can change when an export took too much memory at once.
_MEMORY_HINT = (
    "Make the query return or compute less at once (long strings, large lists or groups)."
)


class WorkerMemoryError(LimitExceededError):
    """The worker's watch stopped this attempt: the process's memory passed the worker's limit
    (QEXPORT_WORKER_MAX_MEMORY) while it ran. `again`: others ran beside it while the memory
    grew, so it is handed back to run alone next time while attempts remain; `final_detail`
    is what it fails with otherwise."""

    def __init__(self, message: str, *, again: bool = False, final: str = "") -> None:
        super().__init__(message)
        self.again = again
        self.final_detail = bounded_detail(final or message)

    @classmethod
    def passed(cls, limit: int, reached: int, *, others: int) -> WorkerMemoryError:
        """The watch's verdict for one attempt, stopped with `others` beside it: failed when
        it ran alone, otherwise handed back."""
        passed = f"the worker's memory passed QEXPORT_WORKER_MAX_MEMORY ({binary_size(limit)})"
        reached_words = f"{reached // 1024**2:,} MiB reached"  # 2,071 MiB, not "2 GiB"
        if not others:
            return cls(
                f"{passed} while this export ran ({reached_words}): it was stopped. {_MEMORY_HINT}"
            )
        ran = "1 other export" if others == 1 else f"{others} other exports"
        stopped = f"{passed} while this export and {ran} ran ({reached_words}): it was stopped"
        return cls(
            f"{stopped} and goes back to the queue, to run alone in its worker next time",
            again=True,
            final=f"{stopped}. {_MEMORY_HINT}",
        )


def memory_refused_detail(limit: int) -> str:
    """The detail of an export whose allocation the process refused; `limit`: the worker's
    QEXPORT_WORKER_MAX_MEMORY (0: none)."""
    if not limit:
        return f"the worker ran out of memory while this export ran: it was stopped. {_MEMORY_HINT}"
    return (
        "this export asked for more memory at once than the worker may take"
        f" (QEXPORT_WORKER_MAX_MEMORY is {binary_size(limit)}): it was stopped. {_MEMORY_HINT}"
    )


class SourceUnavailableError(QExportError):
    code = FailureCode.SOURCE_UNAVAILABLE


class SourceOutOfMemoryError(SourceUnavailableError):
    """The source's engine could not get the memory a statement needed (DuckDB in this
    process): an export tries again, as other exports may have crowded it out; a preview,
    which runs alone in a process of bounded memory, fails `limit_exceeded`."""


class StorageUnavailableError(QExportError):
    code = FailureCode.STORAGE_UNAVAILABLE


class RenderFailedError(QExportError):
    code = FailureCode.RENDER_FAILED


class CancelledError(QExportError):
    code = FailureCode.CANCELLED


class LeaseLostError(QExportError):
    """The attempt no longer holds the export: stop producing and abort the upload."""


class MetadataUnavailableError(QExportError):
    """The metadata database could not be reached or was locked: nothing was written."""


class ObjectExistsError(QExportError):
    """A completed object is already stored at the key (create-if-absent lost the race)."""

    code = FailureCode.STORAGE_UNAVAILABLE


class InvalidRequestError(QExportError):
    """A request refused before anything is recorded (unknown format, bad parameter...).

    One refusal names one `field`; a request with several mistakes is refused with all of
    them at once (`problems`, in the order of the request's fields), the first leading.
    """

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        problems: Sequence[InvalidRequestError] = (),
    ) -> None:
        super().__init__(message)
        self.field = field
        self.problems: tuple[InvalidRequestError, ...] = tuple(problems) or (self,)

    @classmethod
    def of(cls, problems: Sequence[InvalidRequestError]) -> InvalidRequestError:
        """One refusal carrying every problem found (each kept as it was raised)."""
        flat = [p for found in problems for p in found.problems]
        if not flat:
            raise ValueError("no problems to refuse with")
        if len(flat) == 1:
            return flat[0]
        first = flat[0]
        return cls(str(first), field=first.field, problems=flat)

    def within(self, prefix: str) -> InvalidRequestError:
        """The same problems with each field put under `prefix` (`since` ->
        `parameters.since`; a problem naming no field names `prefix` itself)."""

        def moved(problem: InvalidRequestError) -> InvalidRequestError:
            named = problem.field or ""
            if not named:
                named = prefix
            elif named != prefix and not named.startswith((f"{prefix}.", f"{prefix}[")):
                named = f"{prefix}.{named}"
            return InvalidRequestError(str(problem), field=named)

        return InvalidRequestError.of([moved(p) for p in self.problems])


def top_field(field: str | None) -> str:
    """The request member a problem's field is part of: `sections.2.heading` -> `sections`."""
    return re.split(r"[.\[]", field or "", maxsplit=1)[0]


# Where a problem goes among a request's others: compared as tuples, smallest first.
ProblemOrder = Callable[["InvalidRequestError"], tuple[int, ...]]


def in_field_order(fields: Sequence[str]) -> ProblemOrder:
    """A sort key that puts problems in the order of their top-level `fields` (a field not
    listed goes last); problems of one field keep the order they were found in."""
    rank = {name: index for index, name in enumerate(fields)}
    return lambda problem: (rank.get(top_field(problem.field), len(rank)),)


class Problems:
    """Runs a request's checks one after another and refuses it with every mistake found.

        problems = Problems()
        with problems.check():
            name = valid_name(form.name)
        with problems.check():
            fmt = valid_format(form.format)
        problems.raise_any()

    A check that raises `InvalidRequestError` adds its problems and lets the next check run;
    any other error stops the request as before. Check fields in the order people read them.
    """

    def __init__(self, found: Sequence[InvalidRequestError] = ()) -> None:
        self._found: list[InvalidRequestError] = list(found)

    @contextmanager
    def check(self) -> Iterator[None]:
        try:
            yield
        except InvalidRequestError as exc:
            self._found.append(exc)

    def add(self, exc: InvalidRequestError) -> None:
        self._found.append(exc)

    def passes(self, check: Callable[[], object]) -> bool:
        """Run one check: True when it passed, False when it refused (its problems kept)."""
        with self.check():
            check()
            return True
        return False

    def found(self) -> tuple[InvalidRequestError, ...]:
        """Every problem found so far, one by one, in the order found."""
        return tuple(p for found in self._found for p in found.problems)

    def fields(self) -> set[str]:
        """The top-level fields refused so far (`parameters` for `parameters.0.name`)."""
        return {top_field(p.field) for found in self._found for p in found.problems}

    def __bool__(self) -> bool:
        return bool(self._found)

    def raise_any(self, order: ProblemOrder | None = None) -> None:
        """Raise every problem found so far together; nothing when all checks passed. With
        `order` (a sort key, such as `in_field_order(...)`), in that order rather than the
        order the checks ran in."""
        if not self._found:
            return
        refused = InvalidRequestError.of(self._found)
        if order is not None and len(refused.problems) > 1:
            refused = InvalidRequestError.of(sorted(refused.problems, key=order))
        raise refused


class StatementRefusedError(InvalidRequestError):
    """A query's SQL refused by its source when the query is saved (field `sql`)."""

    def __init__(self, message: str, *, position: TextPosition | None = None) -> None:
        super().__init__(message, field="sql")
        self.position = position


class NotFoundError(QExportError):
    """The thing asked for does not exist or is not visible to the caller."""


class ConflictError(QExportError):
    """The transition is not allowed from the record's current state."""


class UnauthorizedError(QExportError):
    """No valid credentials: a missing, malformed, tampered or revoked token."""


class ForbiddenError(QExportError):
    """Authenticated, but the role does not allow this action."""


class TooManyRequestsError(QExportError):
    """A per-requester limit was reached; try again after `retry_after` seconds."""

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


# How long a requester at the cap is asked to wait: exports usually settle within that.
CAP_RETRY_AFTER_SECONDS = 30


def unsettled_cap_reached(unsettled: int, cap: int) -> TooManyRequestsError:
    """The refusal of a request from someone who already has `cap` exports unsettled."""
    return TooManyRequestsError(
        f"you already have {unsettled} exports queued or running (at most {cap});"
        " wait for some to finish or cancel them",
        retry_after=CAP_RETRY_AFTER_SECONDS,
    )


# A request waits for a person, usually hours: asking again within the hour is pointless.
WAITING_CAP_RETRY_AFTER_SECONDS = 3600


def waiting_cap_reached(waiting: int, cap: int) -> TooManyRequestsError:
    """The refusal of an export request from someone who already has `cap` requests waiting
    for an admin's approval."""
    return TooManyRequestsError(
        f"you have {waiting} export requests waiting for an admin's approval already (at most"
        f" {cap}); wait for a decision (or withdraw one) first",
        retry_after=WAITING_CAP_RETRY_AFTER_SECONDS,
    )


FAILURE_REASONS: dict[FailureCode, str] = {
    FailureCode.ACCESS_LOST: "You may no longer read what this export was made from.",
    FailureCode.QUERY_INVALID: "The query could not run.",
    FailureCode.QUERY_TIMEOUT: "The query took longer than allowed.",
    FailureCode.LIMIT_EXCEEDED: "The result was larger than allowed.",
    FailureCode.RENDER_FAILED: "The file could not be written.",
    FailureCode.CANCELLED: "The export was cancelled.",
    FailureCode.SOURCE_UNAVAILABLE: "The data source could not be reached.",
    FailureCode.STORAGE_UNAVAILABLE: "The file store could not be reached.",
    FailureCode.ATTEMPTS_EXHAUSTED: "The export was tried too many times.",
    FailureCode.INTERNAL: "Something went wrong on our side.",
}
