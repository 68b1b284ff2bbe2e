"""The audit trail's store: its chains, appended in the callers' transactions (`chain`), the
AuditLog port over them (`log`), and the writer thread behind `record_soon` (`writer`)."""
