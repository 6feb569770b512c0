"""The engine process: its command loop (host), the session that owns a loaded model, the checks before a load
(preflight) and llama.cpp's own log."""
