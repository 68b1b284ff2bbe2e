"""The Spark Connect source."""
