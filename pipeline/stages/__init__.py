"""The stages of the pipe list, one module each, in release order (see pipeline/stage.py: PIPES)."""
