"""The Connections page: remote OpenAI-compatible servers the window can chat with."""
