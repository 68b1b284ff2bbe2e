"""qexport: saved SQL queries turned into files people can download."""

__version__ = "0.1.0"
