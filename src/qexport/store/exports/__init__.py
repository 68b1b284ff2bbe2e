"""The export queue on SQLAlchemy Core: the queue itself (`queue.SqlExportQueue`), over its
reads (`reads`); the guarded transitions (`transitions`), fair claiming (`claims`) and
requesting (`requests`), which other stores' transactions use too; and an export's row as its
record (`records`)."""
