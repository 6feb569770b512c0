"""Hearth's OpenAI-compatible API: a client of the backend seam (app/engine/backend.py) over HTTP."""
