"""Headless model layer: paths, settings, errors, model files, chats, metrics.

Nothing under app.core imports Qt; the CLI and the tests drive it directly.
"""
