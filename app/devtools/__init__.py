"""Developer tools used by tests and benchmarks; not part of the user-facing app."""
