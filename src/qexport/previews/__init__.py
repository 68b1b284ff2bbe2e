"""Previews run in processes of their own, whose memory is bounded (processes.py says why and
how; child.py is the preview process's side)."""
