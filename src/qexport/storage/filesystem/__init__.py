"""The filesystem object store: `store` (uploads, reads, listings), `layout` (where things
live on disk and how they are written durably), `assemble` (joining parts in the kernel)."""

from qexport.storage.filesystem.store import FilesystemObjectStore

__all__ = ["FilesystemObjectStore"]
