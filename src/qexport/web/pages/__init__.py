"""The pages: one module per family of pages (its routes and forms)."""
