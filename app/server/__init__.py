"""Hearth's OpenAI-compatible API: a client of the backend seam (app/backends/backend.py) over HTTP."""
