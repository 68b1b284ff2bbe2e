"""The web UI: server-rendered pages over the same services and access rules as the API."""
