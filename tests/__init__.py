"""dst test suite."""
