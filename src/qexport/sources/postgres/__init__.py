"""The PostgreSQL source."""
