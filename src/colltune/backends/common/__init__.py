"""Pieces several families share (runtime parameters set through the environment).

Also: `tools`, how a prefix's own tools are run and why one did not answer."""
