"""What this machine can do, asked in child processes so that a crash costs nothing: whether llama.cpp's extra
buffer types are safe here, which GPU runtimes load, and free GPU memory."""
