"""Any database SQLAlchemy has a dialect for, as a source."""
