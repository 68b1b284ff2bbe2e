"""Deliveries: telling recipients about a settled export, by email (SMTP) and webhook."""
