"""What the clients and the engine say to each other, shared by both sides of the seam.

The messages (load and sampling options, commands, typed events with request ids), the checks of option
fields, the token coalescer, and the formats a request carries into the engine: tool calls and the grammars
that JSON schemas become. Imported by the engine process and by every client (backends, server, window,
CLI, tools, docs), so it holds neither Qt nor llama.cpp: tests/test_layers.py checks both.
"""
