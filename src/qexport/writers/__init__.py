"""File writers: Arrow record batches in, CSV / TSV / JSON Lines / Parquet / XLSX bytes out."""
