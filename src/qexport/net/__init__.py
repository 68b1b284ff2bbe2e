"""Talking to other machines safely: the egress policy, SMTP URLs, this machine's own
addresses, trusted proxies."""
