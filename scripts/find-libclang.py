#!/usr/bin/env python3
"""Can bindgen load a working libclang here? Exit 0 and print its path if so.

The build of the `redis-module` crate runs bindgen, which loads libclang at
run time through clang-sys. This asks the same question instead of guessing
from file names: it looks where clang-sys looks (LIBCLANG_PATH, then
`llvm-config --libdir`, then LD_LIBRARY_PATH and the usual system library
directories), for the names clang-sys accepts, loads each candidate, and
parses a file that includes <stddef.h> and <stdint.h>, as redismodule.h does.
A library that loads but cannot find clang's own headers (package
libclang-common-N-dev) fails the parse, as bindgen would.

`libclang-cpp.so.N`, which Debian's image ships without libclang itself, is
not libclang: it has no C API (clang_createIndex), so it fails to qualify.
"""

import ctypes
import glob
import os
import subprocess
import sys
import tempfile

NAMES = ["libclang.so", "libclang-*.so", "libclang.so.*", "libclang-*.so.*"]
SYSTEM_DIRS = [
    "/usr/local/lib*",
    "/usr/lib*",
    "/usr/lib*/*",
    "/usr/lib*/*/*",
    "/usr/local/llvm*/lib*",
    "/usr/lib/llvm-*/lib",
]


def candidate_dirs():
    """(path, may_be_a_file): LIBCLANG_PATH may name the library itself."""
    given = os.environ.get("LIBCLANG_PATH")
    if given:
        yield given, True
    try:
        llvm_config = os.environ.get("LLVM_CONFIG_PATH", "llvm-config")
        out = subprocess.run(
            [llvm_config, "--libdir"], capture_output=True, text=True, timeout=10
        )
        if out.returncode == 0 and out.stdout.strip():
            yield out.stdout.strip(), False
    except (OSError, subprocess.TimeoutExpired):
        pass
    for d in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        if d:
            yield d, False
    for pattern in SYSTEM_DIRS:
        for d in sorted(glob.glob(pattern)):
            if os.path.isdir(d):
                yield d, False


def candidates():
    seen = set()
    for d, may_be_a_file in candidate_dirs():
        if may_be_a_file and os.path.isfile(d):
            files = [d]
        else:
            files = [f for name in NAMES for f in sorted(glob.glob(os.path.join(d, name)))]
        for f in files:
            real = os.path.realpath(f)
            if real in seen or "libclang-cpp" in os.path.basename(f):
                continue
            seen.add(real)
            yield f


def parses_headers(path, source):
    try:
        lib = ctypes.CDLL(path)
        create_index = lib.clang_createIndex
        parse = lib.clang_parseTranslationUnit
    except (OSError, AttributeError):
        return False
    create_index.restype = ctypes.c_void_p
    parse.restype = ctypes.c_void_p
    parse.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_uint,
        ctypes.c_uint,
    ]
    lib.clang_getNumDiagnostics.argtypes = [ctypes.c_void_p]
    lib.clang_getNumDiagnostics.restype = ctypes.c_uint
    index = create_index(0, 0)
    if not index:
        return False
    unit = parse(index, source.encode(), None, 0, None, 0, 0)
    return bool(unit) and lib.clang_getNumDiagnostics(unit) == 0


def main():
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "probe.c")
        with open(source, "w") as f:
            f.write("#include <stddef.h>\n#include <stdint.h>\nsize_t probe(int64_t x);\n")
        for path in candidates():
            # Each in a child process: a library that aborts when loaded
            # (sanitizer runtimes do) must not end the search.
            probe = subprocess.run(
                [sys.executable, __file__, "--probe", path, source],
                capture_output=True,
                timeout=60,
            )
            if probe.returncode == 0:
                print(path)
                return 0
    return 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--probe":
        sys.exit(0 if parses_headers(sys.argv[2], sys.argv[3]) else 1)
    sys.exit(main())
