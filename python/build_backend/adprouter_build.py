"""adprouter's PEP 517 build backend: standard library only, so that
``pip install --no-index .`` works offline (pyproject.toml: ``requires = []``,
``backend-path``).

build_wheel builds libadprouter.so through ``build.sh build`` (the one home of
the Go build and link flags) into a temporary directory and writes a wheel of
python/adprouter with the library inside as ``adprouter/libadprouter.so``,
and the TensorRT-LLM start-up hook (python/adprouter-trtllm.pth and
python/_adprouter_startup.py) at its root.
The wheel has no Python extension unless python/adprouter/_speedups.c exists
and this interpreter can compile it (a C compiler and Python.h); then it also
holds ``adprouter/_speedups<EXT_SUFFIX>`` and is tagged for this interpreter
(``cp311-cp311-...``). Otherwise it is ``py3-none-<platform>``: any Python 3
on a Linux of that architecture with the glibc the library needs, which is
read from the library's symbol versions (``manylinux_2_34_x86_64`` for a
library that needs GLIBC_2.34).

The version is ADPR_VERSION of include/adprouter.h; the rest of the metadata
is the [project] table of pyproject.toml.
"""

import base64
import gzip
import hashlib
import io
import os
import re
import shutil
import struct
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = "adprouter"

# The interpreter-start hook: the wheel puts its files at its root, beside
# the package, so that they land in site-packages (the .pth runs at every
# start and imports the module only when asked; see the module).
HOOK_FILES = ("adprouter-trtllm.pth", "_adprouter_startup.py")

# What an sdist carries: everything `build.sh build` and this backend read:
# these files and folders, plus every top-level folder holding Go library
# code (go_dirs), so that a new Go package cannot be left out.
SDIST_FILES = ("LICENSE", "README.md", "build.sh", "go.mod", "go.sum", "pyproject.toml") + tuple(
    "python/" + f for f in HOOK_FILES)
SDIST_DIRS = ("include", "packaging", "python/adprouter", "python/build_backend")
# Top-level folders with Go code that the library does not build.
_NOT_LIBRARY = ("cmd", "examples", "build", "python", "docs", "testdata")


def go_dirs(root=ROOT):
    """The top-level folders that hold a Go source file (tests aside), but
    the command and example folders: the library's packages."""
    out = []
    for d in sorted(os.listdir(root)):
        top = os.path.join(root, d)
        if d.startswith(".") or d in _NOT_LIBRARY or not os.path.isdir(top):
            continue
        if any(f.endswith(".go") and not f.endswith("_test.go")
               for _, _, files in os.walk(top) for f in files):
            out.append(d)
    return out

# Wheel and sdist entries get this timestamp (or SOURCE_DATE_EPOCH's) so that
# the same tree gives the same archive.
_EPOCH = 315532800  # 1980-01-01, the earliest a zip can hold


# --- metadata ---------------------------------------------------------------


def version(root=ROOT):
    """ADPR_VERSION of include/adprouter.h."""
    with open(os.path.join(root, "include", "adprouter.h"), encoding="utf-8") as f:
        m = re.search(r'^#define ADPR_VERSION "([^"]+)"$', f.read(), re.M)
    if not m:
        raise RuntimeError("include/adprouter.h has no line #define ADPR_VERSION \"X.Y.Z\"")
    return m.group(1)


def project(root=ROOT):
    """The [project] table of pyproject.toml as {key: str or [str]}.

    A deliberately small reader (tomllib needs Python 3.11; the backend runs
    on 3.8): ``key = "text"`` and ``key = ["a", "b"]`` lines only, which is
    all the table uses; anything else in it is an error, not a silent skip.
    """
    table, out = None, {}
    with open(os.path.join(root, "pyproject.toml"), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("["):
                table = line
                continue
            if table != "[project]":
                continue
            m = re.fullmatch(r'([A-Za-z0-9_-]+)\s*=\s*("[^"\\]*"|\[\s*(?:"[^"\\]*"\s*,?\s*)*\])', line)
            if not m:
                raise RuntimeError("pyproject.toml:%d: the build backend reads only key = \"text\" "
                                   "or key = [\"text\", ...] in [project], got %r" % (n, line))
            key, value = m.groups()
            if value.startswith("["):
                out[key] = re.findall(r'"([^"]*)"', value)
            else:
                out[key] = value[1:-1]
    for key in ("name", "description", "requires-python", "license", "readme"):
        if key not in out:
            raise RuntimeError("pyproject.toml: [project] needs %s" % key)
    return out


def metadata(root=ROOT):
    """The core metadata (METADATA / PKG-INFO) text."""
    p = project(root)
    lines = [
        "Metadata-Version: 2.1",
        "Name: %s" % p["name"],
        "Version: %s" % version(root),
        "Summary: %s" % p["description"],
        "License: %s" % p["license"],
        "Requires-Python: %s" % p["requires-python"],
    ]
    for c in p.get("classifiers", []):
        lines.append("Classifier: %s" % c)
    lines.append("Description-Content-Type: text/markdown")
    with open(os.path.join(root, p["readme"]), encoding="utf-8") as f:
        readme = f.read()
    return "\n".join(lines) + "\n\n" + readme


def _dist_info():
    return "%s-%s.dist-info" % (PACKAGE, version())


# --- the library's platform -------------------------------------------------

_SHT_GNU_VERNEED = 0x6FFFFFFE
_MACHINES = {62: "x86_64", 183: "aarch64", 21: "ppc64le", 22: "s390x"}


def elf_needs(path):
    """(architecture, max glibc version as (major, minor) or None) of an ELF
    shared library, from its version-needed section (what readelf -V shows
    as "Version needs"): the wheel's platform tag. 64-bit little-endian ELF
    only, which is what Go's c-shared mode builds on the supported targets."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise RuntimeError("%s is not a 64-bit little-endian ELF file" % path)
    machine, = struct.unpack_from("<H", data, 18)
    shoff, = struct.unpack_from("<Q", data, 40)
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    best = None
    for _, sh_type, _, _, offset, _, link, info, _, _ in sections:
        if sh_type != _SHT_GNU_VERNEED:
            continue
        strtab = sections[link][4]

        def name(off):
            end = data.index(b"\0", strtab + off)
            return data[strtab + off:end].decode()

        pos = offset
        for _ in range(info):  # sh_info: number of Verneed entries
            _, cnt, _, aux, nxt = struct.unpack_from("<HHIII", data, pos)
            apos = pos + aux
            for _ in range(cnt):
                _, _, _, vname, anext = struct.unpack_from("<IHHII", data, apos)
                m = re.fullmatch(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?", name(vname))
                if m:
                    v = (int(m.group(1)), int(m.group(2)))
                    best = v if best is None or v > best else best
                apos += anext
            pos += nxt
    arch = _MACHINES.get(machine)
    if arch is None:
        raise RuntimeError("%s: unsupported ELF machine %d" % (path, machine))
    return arch, best


def platform_tag(library):
    arch, glibc = elf_needs(library)
    if glibc is None:
        return "linux_" + arch
    return "manylinux_%d_%d_%s" % (glibc[0], glibc[1], arch)


# --- building ---------------------------------------------------------------


def soname(root=ROOT):
    """libadprouter.so.N for N = ADPR_ABI_VERSION of include/adprouter.h."""
    with open(os.path.join(root, "include", "adprouter.h"), encoding="utf-8") as f:
        m = re.search(r"^#define ADPR_ABI_VERSION (\d+)$", f.read(), re.M)
    if not m:
        raise RuntimeError("include/adprouter.h has no line #define ADPR_ABI_VERSION N")
    return "libadprouter.so." + m.group(1)


def go_toolchain(environ=None):
    """The go command build.sh will use ($GO, else go on PATH, else
    /usr/local/go/bin/go), or raise BuildError saying what is missing."""
    env = os.environ if environ is None else environ
    if env.get("GO"):
        go = env["GO"]
        found = shutil.which(go, path=env.get("PATH"))
        if found is None:
            raise BuildError("GO=%s is not an executable go command" % go)
        return found
    go = shutil.which("go", path=env.get("PATH")) or (
        "/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    if go is None:
        raise BuildError("building adprouter needs the Go toolchain (go 1.26 or newer): no go on PATH "
                         "or at /usr/local/go/bin/go; install Go (https://go.dev/dl/) or set GO")
    return go


class BuildError(Exception):
    """A build step that cannot work here; its message says why in one line."""


def build_library(outdir, root=ROOT):
    """Builds the library (its soname: soname()) into outdir with build.sh
    and returns its path. Without a Go toolchain, or when build.sh fails,
    it exits with one line saying so (pip shows it instead of a traceback)."""
    try:
        go_toolchain()
    except BuildError as e:
        raise SystemExit("error: %s" % e) from None
    env = dict(os.environ, ADPROUTER_BUILD_DIR=outdir)
    # build.sh's progress goes to stderr: stdout may be a frontend's channel.
    done = subprocess.run(["bash", os.path.join(root, "build.sh"), "library"], env=env, stdout=sys.stderr)
    if done.returncode != 0:
        raise SystemExit("error: ./build.sh library failed (exit %d) building libadprouter; its output is above"
                         % done.returncode)
    return os.path.join(outdir, soname(root))


def build_speedups(source, outdir):
    """Compiles the optional extension source into outdir for this
    interpreter and returns the file's path, or None when it cannot be built
    here (no CPython, no Python.h, no compiler, a compile error): the package
    then runs on its pure-Python code, so this is not an error."""
    if sys.implementation.name != "cpython" or not os.path.exists(source):
        return None
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        return None
    cc = os.environ.get("CC") or (sysconfig.get_config_var("CC") or "cc").split()[0]
    out = os.path.join(outdir, "_speedups" + sysconfig.get_config_var("EXT_SUFFIX"))
    # The extension includes adprouter.h for the ABI's struct layouts.
    cmd = [cc, "-shared", "-fPIC", "-O2", "-I" + include, "-I" + os.path.join(ROOT, "include"), source, "-o", out]
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as e:
        print("adprouter_build: no speedups (%s: %s); pure Python" % (cc, e), file=sys.stderr)
        return None
    if p.returncode != 0:
        print("adprouter_build: no speedups (%s failed); pure Python:\n%s"
              % (" ".join(cmd), p.stdout.decode(errors="replace")), file=sys.stderr)
        return None
    return out


def interpreter_tag():
    """cpXY (cpXYt for a free-threaded build): the python and ABI tag of a
    wheel with an extension built by this interpreter."""
    t = "cp%d%d" % sys.version_info[:2]
    return t, t + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else "")


def _mtime():
    return max(int(os.environ.get("SOURCE_DATE_EPOCH", _EPOCH)), _EPOCH)


def _package_files(root=ROOT):
    """(archive name, path) of the package's Python files."""
    pkg = os.path.join(root, "python", PACKAGE)
    return [("%s/%s" % (PACKAGE, f), os.path.join(pkg, f))
            for f in sorted(os.listdir(pkg)) if f.endswith(".py")]


class _Wheel:
    """A wheel being written: entries plus their RECORD lines."""

    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED)
        self.records = []

    def add(self, name, data, mode=0o644):
        info = zipfile.ZipInfo(name, _zip_time())
        info.external_attr = (0o100000 | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.records.append("%s,sha256=%s,%d" % (name, digest, len(data)))

    def add_file(self, name, path, mode=0o644):
        with open(path, "rb") as f:
            self.add(name, f.read(), mode)

    def close(self, record_name):
        self.records.append("%s,," % record_name)
        info = zipfile.ZipInfo(record_name, _zip_time())
        info.external_attr = 0o100644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, "\n".join(self.records) + "\n")
        self.zip.close()


def _zip_time():
    return time.gmtime(_mtime())[:6]


def _wheel_text(tag):
    return ("Wheel-Version: 1.0\nGenerator: adprouter_build %s\nRoot-Is-Purelib: false\nTag: %s\n"
            % (version(), tag))


# --- PEP 517 hooks ------------------------------------------------------------


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    d = os.path.join(metadata_directory, _dist_info())
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w", encoding="utf-8") as f:
        f.write(metadata())
    return os.path.basename(d)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    with tempfile.TemporaryDirectory(prefix="adprouter-wheel-") as tmp:
        lib = build_library(tmp)
        speedups = build_speedups(os.path.join(ROOT, "python", PACKAGE, "_speedups.c"), tmp)
        plat = platform_tag(lib)
        if speedups:
            py, abi = interpreter_tag()
        else:
            py, abi = "py3", "none"
        tag = "%s-%s-%s" % (py, abi, plat)
        name = "%s-%s-%s.whl" % (PACKAGE, version(), tag)
        os.makedirs(wheel_directory, exist_ok=True)
        path = os.path.join(wheel_directory, name)
        w = _Wheel(path)
        for arc, src in _package_files():
            w.add_file(arc, src)
        w.add_file("%s/libadprouter.so" % PACKAGE, lib, 0o755)
        for f in HOOK_FILES:
            w.add_file(f, os.path.join(ROOT, "python", f))
        if speedups:
            w.add_file("%s/%s" % (PACKAGE, os.path.basename(speedups)), speedups, 0o755)
        di = _dist_info()
        w.add(di + "/METADATA", metadata().encode())
        w.add(di + "/WHEEL", _wheel_text(tag).encode())
        w.add_file(di + "/LICENSE", os.path.join(ROOT, "LICENSE"))
        w.close(di + "/RECORD")
    return name


def sdist_files(root=ROOT):
    """The sdist's files, relative to root, sorted."""
    out = [f for f in SDIST_FILES]
    for d in tuple(go_dirs(root)) + SDIST_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, d)):
            dirnames[:] = sorted(x for x in dirnames if x != "__pycache__")
            for f in filenames:
                if not f.endswith((".pyc", ".so")):
                    out.append(os.path.relpath(os.path.join(dirpath, f), root))
    return sorted(out)


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (PACKAGE, version())
    os.makedirs(sdist_directory, exist_ok=True)
    name = base + ".tar.gz"
    mtime = _mtime()

    def entry(arc, data, mode):
        info = tarfile.TarInfo(base + "/" + arc)
        info.size, info.mode, info.mtime = len(data), mode, mtime
        info.uname = info.gname = "root"
        tar.addfile(info, io.BytesIO(data))

    with open(os.path.join(sdist_directory, name), "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=mtime, filename="") as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for rel in sdist_files():
                    path = os.path.join(ROOT, rel)
                    with open(path, "rb") as f:
                        data = f.read()
                    entry(rel, data, 0o755 if os.access(path, os.X_OK) else 0o644)
                entry("PKG-INFO", metadata().encode(), 0o644)
    return name
