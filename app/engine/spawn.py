"""Moved to app/core/proc.py (core's quantizer and converter start children too, and core imports nothing
above it). Kept as a re-export for the engine client and probe until they import app.core.proc directly."""

from app.core.proc import ENTRY_FLAGS, child_command, child_env, is_frozen

__all__ = ["ENTRY_FLAGS", "child_command", "child_env", "is_frozen"]
