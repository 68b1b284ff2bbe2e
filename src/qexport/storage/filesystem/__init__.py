"""The filesystem object store: `store` (uploads, reads, listings), `layout` (where things
live on disk and how they are written durably), `assemble` (joining parts in the kernel),
`lifecycle` (the sweeper that applies the S3 bucket's lifecycle rules to a folder)."""

from qexport.storage.filesystem.store import FilesystemObjectStore

__all__ = ["FilesystemObjectStore"]
