"""structlog set-up: readable lines on a terminal, JSON lines otherwise."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(*, json: bool | None = None, level: int = logging.INFO) -> None:
    """Send structured logs to stderr; bind export_id, attempt and worker via contextvars."""
    if json is None:
        json = not sys.stderr.isatty()
    # JSON lines carry a failure's traceback as text under "exception" (the console renderer
    # prints it itself). Never a frame's local variables (row values and credentials among
    # them): not dict_tracebacks, and on a terminal the plain traceback, not rich's, which
    # shows them.
    rendering: list[structlog.types.Processor] = (
        [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
        if json
        else [
            structlog.dev.ConsoleRenderer(
                colors=False, exception_formatter=structlog.dev.plain_traceback
            )
        ]
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *rendering,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
