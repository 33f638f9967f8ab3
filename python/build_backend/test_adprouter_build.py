"""Tests of the build backend's parts that need no Go build (install_test.go
builds real wheels):

    python3 -m unittest discover -s python/build_backend -v
"""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import adprouter_build as b  # noqa: E402

EXTENSION = r"""#include <Python.h>
static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "_speedups", NULL, -1, NULL};
PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&m); }
"""


class SpeedupsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.src = os.path.join(self.dir.name, "_speedups.c")
        with open(self.src, "w") as f:
            f.write(EXTENSION)
        self.cc = os.environ.pop("CC", None)
        self.addCleanup(self.restore_cc)

    def restore_cc(self):
        os.environ.pop("CC", None)
        if self.cc is not None:
            os.environ["CC"] = self.cc

    def test_no_source_is_pure_python(self):
        self.assertIsNone(b.build_speedups(os.path.join(self.dir.name, "missing.c"), self.dir.name))

    def test_failing_or_missing_compiler_is_pure_python(self):
        for cc in ("false", os.path.join(self.dir.name, "no-such-cc")):
            with self.subTest(cc=cc):
                os.environ["CC"] = cc
                self.assertIsNone(b.build_speedups(self.src, self.dir.name))

    def test_compile_error_is_pure_python(self):
        with open(self.src, "a") as f:
            f.write("this is not C;\n")
        self.assertIsNone(b.build_speedups(self.src, self.dir.name))

    def test_builds_with_a_compiler(self):
        import sysconfig
        if not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
            self.skipTest("no Python.h")
        out = b.build_speedups(self.src, self.dir.name)
        self.assertIsNotNone(out)
        self.assertTrue(out.endswith(sysconfig.get_config_var("EXT_SUFFIX")))
        sys.path.insert(0, self.dir.name)
        try:
            import _speedups  # noqa: F401
        finally:
            sys.path.remove(self.dir.name)


class ProjectTest(unittest.TestCase):
    def write(self, text):
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        with open(os.path.join(d.name, "pyproject.toml"), "w") as f:
            f.write(text)
        return d.name

    def test_reads_the_repository_table(self):
        p = b.project()
        self.assertEqual(p["name"], "adprouter")
        self.assertEqual(p["dynamic"], ["version"])

    def test_rejects_what_it_cannot_read(self):
        root = self.write('[project]\nname = "x"\nauthors = [{name = "a"}]\n')
        with self.assertRaisesRegex(RuntimeError, "pyproject.toml:3"):
            b.project(root)

    def test_requires_the_fields_it_writes(self):
        root = self.write('[project]\nname = "x"\n')
        with self.assertRaisesRegex(RuntimeError, "needs description"):
            b.project(root)


class ToolchainTest(unittest.TestCase):
    """Without Go, building stops with one line saying so, not a traceback."""

    def test_go_from_the_environment(self):
        with tempfile.TemporaryDirectory() as d:
            fake = os.path.join(d, "go")
            with open(fake, "w") as f:
                f.write("#!/bin/sh\n")
            os.chmod(fake, 0o755)
            self.assertEqual(b.go_toolchain({"GO": fake, "PATH": ""}), fake)
            self.assertEqual(b.go_toolchain({"PATH": d}), fake)

    def test_missing_go_is_one_clear_line(self):
        with self.assertRaises(b.BuildError) as cm:
            b.go_toolchain({"GO": "/nonexistent/go", "PATH": ""})
        self.assertIn("GO=/nonexistent/go", str(cm.exception))
        env = dict(os.environ, GO="/nonexistent/go")
        code = "import adprouter_build as b; b.build_library(%r)" % tempfile.gettempdir()
        p = subprocess.run([sys.executable, "-c", code], env=dict(env, PYTHONPATH=HERE),
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 1)
        self.assertEqual(p.stderr.strip().splitlines(), ["error: GO=/nonexistent/go is not an executable go command"])


class VersionTest(unittest.TestCase):
    def test_version_is_the_headers(self):
        with open(os.path.join(b.ROOT, "include", "adprouter.h")) as f:
            self.assertIn('#define ADPR_VERSION "%s"\n' % b.version(), f.read())


if __name__ == "__main__":
    unittest.main()
