"""Owners of on-disk documents: one module per format (schema, type strings, reading, writing, validation)."""
