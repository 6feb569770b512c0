"""Chat with your documents: parse files, chunk them, index them (SQLite FTS5 and dense vectors), retrieve
passages for a question and put them into a prompt with numbered sources.

Qt-free. Parsing, chunking and the index use core alone; the embedding model runs in an engine process of its
own through app.backends, which is why this package sits beside bench and server in the layer order.
"""
