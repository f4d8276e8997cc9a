"""Pieces several families share (runtime parameters set through the environment)."""
