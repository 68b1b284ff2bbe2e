"""Sizes as people read them, the same in the CLI, the web pages and delivery emails."""

from __future__ import annotations


def human_size(size: int | None) -> str:
    """`840 bytes`, `3.4 KB`, `12.0 MB` (powers of 1000, as file managers show them); `` for
    no size."""
    if size is None:
        return ""
    if size < 1000:
        return f"{size} byte" if size == 1 else f"{size} bytes"
    value = float(size)
    for unit in ("KB", "MB", "GB", "TB"):
        value /= 1000
        if round(value, 1) < 1000 or unit == "TB":  # 999,950 bytes is 1.0 MB, not 1000.0 KB
            break
    return f"{value:.1f} {unit}"


def binary_size(size: int) -> str:
    """`512 MiB`, `1.5 GiB`, `2 GiB` (powers of 1024, as memory and the size settings are
    written); whole numbers without a decimal."""
    value = float(size)
    unit = "bytes"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    text = f"{value:.1f}".removesuffix(".0")
    return "1 byte" if size == 1 else f"{text} {unit}"
