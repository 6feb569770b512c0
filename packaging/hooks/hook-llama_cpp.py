"""llama-cpp-python loads llama.cpp with ctypes from llama_cpp/lib at run time, which the analysis cannot see.

On Linux, name only the libraries that ctypes opens (libllama.so, libggml.so, libmtmd.so): PyInstaller follows
their DT_NEEDED entries ($ORIGIN) to libggml-base.so.0, libggml-cpu.so.0 (and libggml-cuda.so.0 in a CUDA
build) into the same folder. Collecting the whole folder would copy every versioned symlink as a file
(three copies of each library). The multimodal library (mtmd) serves llama_cpp.mtmd_cpp: a model's projector
(app/engine/media/projector.py). Windows and macOS name their libraries without versions: take them all.
"""

import sys
from pathlib import Path

from PyInstaller.utils.hooks import get_package_paths

_, package_dir = get_package_paths("llama_cpp")
lib = Path(package_dir) / "lib"
if sys.platform.startswith("linux"):
    wanted = [lib / "libllama.so", lib / "libggml.so", lib / "libmtmd.so"]
else:
    wanted = [path for path in lib.iterdir() if path.suffix in (".dll", ".dylib")]
binaries = [(str(path), "llama_cpp/lib") for path in sorted(wanted) if path.is_file()]
excludedimports = ["llama_cpp.server", "llama_cpp.llava_cpp", "openai"]
# The JSON-schema converter, as a file: app/protocol/gbnf.py loads it on its own, without libllama, in the
# window's and the server's processes (a module inside the bundle's archive would need the package import).
datas = [(str(Path(package_dir) / "llama_grammar.py"), "llama_cpp")]
