"""`python -m colltune.cli`."""

from colltune.cli import main

main()
