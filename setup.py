# pybroker build: the Cython extension list and build options only.
"""Build pybroker's Cython extensions.

Every ``pybroker/_fast/<name>.pyx`` becomes the extension ``pybroker._fast.<name>``, and every
``pybroker/_fast/<package>/<name>.pyx`` (the send fast path's ``send/``) the extension
``pybroker._fast.<package>.<name>``; all link zlib (Java's CRC32 is zlib's crc32). Cythonizing
happens in ``build_ext`` only, so metadata steps stay cheap. Build switches (read here and
nowhere else):

* ``PYBROKER_DEBUG=1``    defines PYBROKER_DEBUG, enables line tracing and annotation.
* ``PYBROKER_SANITIZE=1`` adds ASan/UBSan.
* ``PYBROKER_BUILD_ONLY=frame,send.take`` builds only those extensions (development).
* ``build_ext --cython-always`` regenerates every .c even when it looks up to date.

The gRPC front (``pybroker/_fast/grpc_front/``: C++ on Debian's libgrpc++, ``grpcNativeFront``)
is built only when ``pkg-config`` finds grpc++ and protobuf and ``protoc`` is there (``apt-get
install libgrpc++-dev libprotobuf-dev protobuf-compiler pkg-config``): protoc writes the C++
classes of the vendored protos into ``build/rocketmq_v2_cpp`` at build time. Without them the
build warns and leaves the front out, and gRPC workers serve with grpcio alone.

Without ``--force`` / ``--cython-always`` the build is incremental: Cython regenerates a .c only
when its .pyx or a .pxd / .h it uses changed, and only those extensions are compiled again. A
build of another flavour (debug, sanitize) than the last one rebuilds everything: the flavour is
kept in ``build/pybroker-flavour``.
"""
import glob
import os
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext as _build_ext

FAST_DIR = os.path.join("pybroker", "_fast")
DEBUG = os.environ.get("PYBROKER_DEBUG", "") not in ("", "0")
SANITIZE = os.environ.get("PYBROKER_SANITIZE", "") not in ("", "0")
ONLY = [n for n in os.environ.get("PYBROKER_BUILD_ONLY", "").split(",") if n]
FLAVOUR = f"debug={int(DEBUG)} sanitize={int(SANITIZE)}\n"
FLAVOUR_FILE = os.path.join("build", "pybroker-flavour")
GRPC_FRONT = "grpc_front"           # its own extension: C++, libgrpc++ (see _grpc_front)
# The vendored protos (tools/regen_grpc.py) and where protoc writes their C++ classes (build/,
# never committed; .ci/run removes build/ first).
PROTO_ROOT = os.path.join("pybroker", "protocol", "rocketmq_v2", "protos")
PROTO_FILES = ("apache/rocketmq/v2/definition.proto", "apache/rocketmq/v2/service.proto")
PROTO_CPP_DIR = os.path.join("build", "rocketmq_v2_cpp")


def _extensions():
    compile_args = ["-O2", "-Wall", "-Wsign-compare", "-Wno-unused-function"]
    link_args = []
    macros = []
    if DEBUG:
        compile_args += ["-O0", "-g"]
        macros += [("PYBROKER_DEBUG", "1"), ("CYTHON_TRACE", "1")]
    if SANITIZE:
        flags = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
        compile_args += flags
        link_args += flags
    extensions = []
    sources = glob.glob(os.path.join(FAST_DIR, "*.pyx")) + \
        glob.glob(os.path.join(FAST_DIR, "*", "*.pyx"))
    for pyx in sorted(sources):
        # frame, send.take: the module's name below pybroker._fast
        stem = os.path.splitext(os.path.relpath(pyx, FAST_DIR))[0].replace(os.sep, ".")
        if stem.startswith(GRPC_FRONT + ".") or (ONLY and stem not in ONLY):
            continue
        extensions.append(Extension(
            "pybroker._fast." + stem, [pyx], include_dirs=[FAST_DIR],
            extra_compile_args=compile_args, extra_link_args=link_args,
            define_macros=macros, libraries=["z"],
        ))
    front = _grpc_front(compile_args, link_args, macros)
    if front is not None and (not ONLY or front.name.removeprefix("pybroker._fast.") in ONLY):
        extensions.append(front)
    return extensions


def _grpc_front(compile_args, link_args, macros):
    """The gRPC front's extension (C++, libgrpc++), or None with a warning when libgrpc++'s
    development files are missing."""
    try:
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "grpc++", "protobuf"],
                               check=True, capture_output=True, text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        print("warning: libgrpc++ not found by pkg-config (apt-get install libgrpc++-dev "
              "pkg-config): the gRPC front (grpcNativeFront) is not built; gRPC workers "
              "serve with grpcio alone", file=sys.stderr)
        return None
    generated = _protobuf_cpp()
    if generated is None:
        return None
    directory = os.path.join(FAST_DIR, GRPC_FRONT)
    return Extension(
        f"pybroker._fast.{GRPC_FRONT}.front",
        [os.path.join(directory, "front.pyx"), os.path.join(directory, "relay.cc"),
         os.path.join(directory, "send.cc"), *generated],
        include_dirs=[FAST_DIR, directory, PROTO_CPP_DIR], language="c++",
        extra_compile_args=compile_args + ["-std=c++17"] +
        [f for f in flags if f.startswith(("-I", "-D", "-pthread"))],
        extra_link_args=link_args + [f for f in flags if not f.startswith(("-I", "-D"))],
        define_macros=macros,
        depends=[os.path.join(directory, "relay.h"), os.path.join(directory, "send.h")],
    )


def _protobuf_cpp():
    """protoc's C++ classes of the vendored RocketMQ 5 protos (the front decodes SendMessage with
    them), generated into build/ at each build where a proto is newer than its output: their
    paths, or None with a warning when protoc is missing."""
    outputs = [os.path.join(PROTO_CPP_DIR, proto[:-len(".proto")] + ".pb.cc")
               for proto in PROTO_FILES]
    sources = [os.path.join(PROTO_ROOT, proto) for proto in PROTO_FILES]
    fresh = all(os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(src)
                for out, src in zip(outputs, sources, strict=True))
    if fresh:
        return outputs
    os.makedirs(PROTO_CPP_DIR, exist_ok=True)
    try:
        subprocess.run(["protoc", f"-I{PROTO_ROOT}", f"--cpp_out={PROTO_CPP_DIR}", *PROTO_FILES],
                       check=True)
    except (OSError, subprocess.CalledProcessError) as error:
        print(f"warning: protoc failed ({error}; apt-get install protobuf-compiler): the gRPC "
              "front (grpcNativeFront) is not built", file=sys.stderr)
        return None
    return outputs


class build_ext(_build_ext):
    user_options = _build_ext.user_options + [
        ("cython-always", None, "regenerate every .c file from its .pyx"),
    ]
    boolean_options = _build_ext.boolean_options + ["cython-always"]

    def initialize_options(self):
        super().initialize_options()
        self.cython_always = False

    def finalize_options(self):
        from Cython.Build import cythonize

        if _last_flavour() != FLAVOUR:
            self.force = True           # objects of another flavour must not be kept
        directives = {"language_level": "3", "embedsignature": True, "linetrace": DEBUG}
        # Every core, for Cython and for the compiler, unless -j says otherwise: pip's build
        # (README's install) passes no -j, and the extensions are independent of each other.
        jobs = int(self.parallel) if self.parallel not in (None, True) else os.cpu_count() or 1
        self.parallel = jobs
        self.distribution.ext_modules[:] = cythonize(
            self.distribution.ext_modules, compiler_directives=directives,
            annotate=DEBUG, force=bool(self.cython_always or self.force), nthreads=jobs)
        super().finalize_options()

    def run(self):
        if ONLY and _last_flavour() != FLAVOUR and os.path.exists(FLAVOUR_FILE):
            os.remove(FLAVOUR_FILE)     # the others keep their flavour: the next build forces
        super().run()
        if not ONLY:
            os.makedirs(os.path.dirname(FLAVOUR_FILE), exist_ok=True)
            with open(FLAVOUR_FILE, "w", encoding="ascii") as stamp:
                stamp.write(FLAVOUR)


def _last_flavour() -> str:
    try:
        with open(FLAVOUR_FILE, encoding="ascii") as stamp:
            return stamp.read()
    except FileNotFoundError:
        return ""


setup(ext_modules=_extensions(), cmdclass={"build_ext": build_ext})
