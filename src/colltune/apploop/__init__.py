"""The application loop: profile a real application (PMPI), tune the sizes it uses, verify it
runs faster with the result."""
