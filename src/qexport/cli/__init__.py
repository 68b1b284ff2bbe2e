"""The `qexport` command: `program` is the root, each command group a module beside it."""

from qexport.cli.program import app, main

__all__ = ["app", "main"]
