"""The shipped scenarios: one module each, with a module-level ``scenario``."""
