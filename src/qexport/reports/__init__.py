"""Report documents: every section's query run with the requester's rights, rendered as one
PDF, XLSX or HTML file."""
