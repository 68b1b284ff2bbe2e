"""The kinds of data source, chosen by the scheme of a source URL.

Every kind, the built-in ones included, is an entry point of the group `qexport.sources`:
its name is the URL scheme, its value a factory
`from_url(name, url, settings, *, allow_privileged_role=False) -> Source` that raises
ValueError (never repeating the URL, which may hold a password) for a URL it cannot use or a
driver that is not installed. A separate package adds a kind by declaring one in its own
metadata:

    [project.entry-points."qexport.sources"]
    clickhouse = "qexport_clickhouse:from_url"

A scheme `a+b` with no entry point of its own falls back to `a`: `sqlalchemy+mssql+pyodbc`
is the generic SQLAlchemy source's. Every source says whether it judges its login's
privileges: `check_role() -> list[str]` connects and judges (PostgresSource.check_role), or
returns [] for a kind that has no login to judge. It says as well what else it can do
(ports/sources.py): `native_copy`, its own writer of some formats, or None; `catalogue(...)`,
what its catalogue holds, or None for a kind that cannot say.
"""

from __future__ import annotations

import functools
import re
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from qexport.config import Settings
    from qexport.ports import Source

GROUP = "qexport.sources"

# RFC 3986's scheme, read by hand: urlsplit() drops a scheme that holds `_` (`cx_oracle`).
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-_]*):")


class SourceFactory(Protocol):
    def __call__(
        self, name: str, url: str, settings: Settings, *, allow_privileged_role: bool = False
    ) -> Source: ...


def scheme_of(url: str) -> str | None:
    """The URL's scheme in lower case, or None when it has none."""
    found = _SCHEME.match(url)
    return found.group(1).lower() if found else None


@functools.cache
def _installed() -> dict[str, EntryPoint]:
    # Read once a process: the installed packages do not change under a running server.
    return {ep.name.lower(): ep for ep in entry_points(group=GROUP)}


def installed_schemes() -> list[str]:
    """The schemes a source URL may use here, sorted; a fallback one shown as `a+<...>`."""
    return sorted(_installed())


def kind_of(scheme: str) -> str | None:
    """The entry point name serving `scheme` (itself, or `a` for `a+b`), or None."""
    installed = _installed()
    if scheme in installed:
        return scheme
    head, plus, rest = scheme.partition("+")
    if plus and rest and head in installed:
        return head
    return None


def unsupported(scheme: str | None, name: str | None = None) -> str:
    """Why a URL names no source kind, listing the installed schemes."""
    where = f" for {name!r}" if name else ""
    if scheme is None:
        what = f"the source URL{where} has no scheme (such as duckdb:///path.duckdb)"
    else:
        what = f"unsupported source URL scheme {scheme!r}{where}"
    return f"{what}; installed: {', '.join(installed_schemes())}"


def factory_for(url: str, name: str | None = None) -> SourceFactory:
    """The factory of the URL's kind; ValueError naming the installed schemes, or the
    package whose source cannot be loaded."""
    scheme = scheme_of(url)
    kind = None if scheme is None else kind_of(scheme)
    if kind is None:
        raise ValueError(unsupported(scheme, name))
    entry = _installed()[kind]
    try:
        factory: SourceFactory = entry.load()
    except ImportError as exc:
        package = entry.dist.name if entry.dist is not None else entry.value
        raise ValueError(
            f"the {kind!r} source of {package!r} cannot be loaded ({exc}); reinstall it"
        ) from None
    return factory


def source_from_url(
    name: str, url: str, settings: Settings, *, allow_privileged_role: bool = False
) -> Source:
    """The source `url` names, built by its kind's factory."""
    factory = factory_for(url, name)
    return factory(name, url, settings, allow_privileged_role=allow_privileged_role)
