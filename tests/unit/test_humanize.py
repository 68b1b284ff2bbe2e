"""Sizes as the CLI, the web pages and delivery emails show them."""

from __future__ import annotations

import pytest

from qexport.domain.humanize import human_size


@pytest.mark.parametrize(
    ("size", "shown"),
    [
        (None, ""),
        (0, "0 bytes"),
        (1, "1 byte"),
        (999, "999 bytes"),
        (1000, "1.0 KB"),
        (999_949, "999.9 KB"),
        (999_950, "1.0 MB"),  # rounds up into the next unit, never "1000.0 KB"
        (1_500_000, "1.5 MB"),
        (2 * 10**12, "2.0 TB"),
        (3 * 10**15, "3000.0 TB"),
    ],
)
def test_sizes_read_as_file_managers_show_them(size: int | None, shown: str) -> None:
    assert human_size(size) == shown
