"""The inference engine: runs in its own process, one per loaded model.

llama.cpp can crash the whole process; keeping it out of the GUI process
turns a crash into an error message and a restart. Nothing here imports Qt.
"""
