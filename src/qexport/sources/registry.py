"""Every data source by name: the configured ones, then those registered in the database."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Mapping
from urllib.parse import urlsplit

import structlog

from qexport.config import Settings
from qexport.ports import AccountStore, Source

log = structlog.get_logger()

DEMO_SOURCE = "demo"


class SourceRegistry(Mapping[str, Source]):
    """Configured sources, then those registered with `qexport sources add`.

    A name not known yet is looked up in the database again, so that a worker started before
    a source was registered finds it at its next export. Configured names win over registered
    ones (registering a configured name is refused anyway).
    """

    def __init__(
        self,
        configured: Mapping[str, Source],
        registered: Callable[[], Mapping[str, str]],
        build: Callable[[str, str], Source],
    ) -> None:
        self._configured = dict(configured)
        self._registered = registered
        self._build = build
        self._built: dict[str, Source] = {}
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> Source:
        found = self._configured.get(name)
        if found is not None:
            return found
        with self._lock:
            found = self._built.get(name)
        if found is not None:
            return found
        url = self._registered().get(name)
        if url is None:
            raise KeyError(name)
        try:
            source = self._build(name, url)
        except ValueError:
            # Checked when it was registered; a row edited by hand since is not a source.
            log.warning("source_unusable", source=name, url=masked_url(url))
            raise KeyError(name) from None
        with self._lock:
            return self._built.setdefault(name, source)

    def names(self) -> list[str]:
        """Every source name, configured or registered, sorted."""
        return sorted({*self._configured, *self._registered()})

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())


def configured_names(settings: Settings) -> frozenset[str]:
    """The sources of the configuration (QEXPORT_SOURCE_*), the built-in demo included."""
    return frozenset({DEMO_SOURCE, *settings.sources})


def source_names(settings: Settings, accounts: AccountStore) -> frozenset[str]:
    """Every source a query may name: configured or registered."""
    return configured_names(settings) | frozenset(accounts.registered_sources())


# libpq also takes a password as a query parameter: `postgresql://u@h/db?password=...`.
_QUERY_PASSWORD = re.compile(r"(?i)(^|&)(password=)[^&]*")


def masked_url(url: str) -> str:
    """The URL with its password (if any) replaced by `***`, safe to print and log."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc
    if password is not None:
        netloc = f"{parts.username or ''}:***@{netloc.rpartition('@')[2]}"
    if "//" not in url:  # not a URL of any source kind: show nothing of it
        return f"{parts.scheme}:***"
    query = _QUERY_PASSWORD.sub(r"\1\2***", parts.query)
    # Rebuilt by hand: urlunsplit would drop the empty authority of `duckdb:///path`.
    masked = f"{parts.scheme}://{netloc}{parts.path}"
    masked += f"?{query}" if parts.query else ""
    return masked + (f"#{parts.fragment}" if parts.fragment else "")
