"""The per-workspace storage quota: bytes of unexpired files, checked as an export settles."""

from __future__ import annotations

from qexport.domain.failures import LimitExceededError


def human_bytes(size: int) -> str:
    """`52428800` -> `50 MiB`: sizes in refusals, in binary units as the settings take them."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def check_workspace_quota(used: int, size: int, quota: int | None) -> None:
    """Refuse a file of `size` bytes that would take the workspace's stored bytes (`used`,
    its unexpired succeeded exports) past `quota`; None or 0: no quota."""
    if quota and used + size > quota:
        raise LimitExceededError(
            f"the file ({human_bytes(size)}) would take the workspace past its storage quota"
            f" ({human_bytes(used)} of {human_bytes(quota)} used by unexpired files;"
            " QEXPORT_WORKSPACE_QUOTA)"
        )
