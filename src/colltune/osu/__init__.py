"""OSU Micro-Benchmarks: reading its output, importing it into a store."""
