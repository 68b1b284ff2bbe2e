"""The DuckDB source: the embedded default and the lake sandbox."""
