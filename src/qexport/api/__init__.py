"""The HTTP API (DESIGN section 5): FastAPI, bearer tokens, RFC 9457 problem documents."""
