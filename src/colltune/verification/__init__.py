"""Verifying an output against the library's own choice in fresh launches."""
