"""Families defined outside colltune, in its own shape (a folder each), for tests."""
