"""The interpreter-start hook (_adprouter_startup.py, adprouter-trtllm.pth)
against a fake TensorRT-LLM package (fake_trtllm.py), each case in a fresh
interpreter.

Every subprocess runs ``python -S -W always``: no site-packages, so the only
.pth processed is the copy of adprouter-trtllm.pth that ``site.addsitedir``
reads exactly as site-packages would, and every warning is printed (so that
"one warning" means one). The .pth is the one beside the adprouter package
the tests run against: python/ of the checkout, or site-packages of an
installed wheel (install_test.go runs these tests there).
"""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fake_trtllm  # noqa: E402

PTH = "adprouter-trtllm.pth"


def _package_root():
    """The folder holding the adprouter package under test (and its .pth)."""
    spec = importlib.util.find_spec("adprouter")
    if spec is None or not spec.origin:
        raise unittest.SkipTest("adprouter is not importable")
    return os.path.dirname(os.path.dirname(os.path.abspath(spec.origin)))


# What every subprocess runs first: the .pth (unless the case runs the hook
# itself) and helpers to report routers.
_PRELUDE = '''
import importlib, json, site, sys
if %(hook)r:
    site.addsitedir(%(pthdir)r)
MODULE = %(module)r

def report(**kw):
    print(json.dumps(kw))

def describe(r):
    """theirs, or what a router of ours looks like from TensorRT-LLM's side."""
    if r == %(theirs)r:
        return r
    m = sys.modules[type(r).__module__]
    fake = importlib.import_module(MODULE)
    return {"module": type(r).__module__, "class": type(r).__name__,
            "isinstance": [isinstance(r, fake.ADPRouter), isinstance(r, getattr(fake, type(r).__name__))],
            "needs_prefix_matches": r.needs_prefix_matches,
            "prefix_source": r.options.get("prefix_source"),
            "exclude_retiring_requests": r.exclude_retiring_requests}

def fakes():
    import trtllm_fakes as F
    return F

def kv_config():
    return fakes().attention_dp_config(enable_kv_cache_aware_routing=True)
'''


def ours(cls="KVCacheAwareADPRouter", needs=True, source=None, exclude=True):
    return {"module": "adprouter.trtllm", "class": cls, "isinstance": [True, True],
            "needs_prefix_matches": needs, "prefix_source": source, "exclude_retiring_requests": exclude}


def warnings_in(stderr):
    """The messages of the warnings printed on stderr."""
    return re.findall(r"^\S.*?: \w*Warning: (.*)$", stderr, re.M)


class StartupHookTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = _package_root()
        pth = os.path.join(cls.root, PTH)
        if not os.path.exists(pth):
            raise AssertionError("no %s beside the adprouter package in %s" % (PTH, cls.root))
        cls.tmp = tempfile.mkdtemp(prefix="adprouter-startup-")
        cls.pthdir = os.path.join(cls.tmp, "site")
        os.makedirs(cls.pthdir)
        shutil.copy(pth, cls.pthdir)
        cls.fakes = {}
        for variant in fake_trtllm.SIGNATURES:
            d = os.path.join(cls.tmp, variant)
            cls.fakes[variant] = (d, fake_trtllm.write(d, variant))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_python(self, code, env=None, variant="pinned", hook=True):
        """Runs code in a fresh interpreter with env (plus the paths) and
        returns (its last stdout line as JSON, stderr)."""
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("TRTLLM", "TLLM", "ADPROUTER_", "OMPI_", "PMIX_", "PMI_"))
                or k == "ADPROUTER_LIBRARY"}
        paths = [self.root, HERE]
        module = fake_trtllm.MODULE
        if variant is not None:
            fake, module = self.fakes[variant]
            paths.insert(0, fake)
        base["PYTHONPATH"] = os.pathsep.join(paths)
        base.update(env or {})
        script = _PRELUDE % {"hook": hook, "pthdir": self.pthdir, "module": module,
                             "theirs": fake_trtllm.THEIRS} + textwrap.dedent(code)
        p = subprocess.run([sys.executable, "-S", "-W", "always", "-c", script], env=base,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
        self.assertEqual(p.returncode, 0, "exit %d\nstdout:\n%s\nstderr:\n%s" % (p.returncode, p.stdout, p.stderr))
        lines = p.stdout.strip().splitlines()
        return (json.loads(lines[-1]) if lines else None), p.stderr

    # ---- on ---------------------------------------------------------------------------------

    def test_enabled(self):
        code = '''
            m = importlib.import_module(MODULE)
            F = fakes()
            report(kv=describe(m.ADPRouter.create(F.Dist(0, 2), F.KVCacheManager(), kv_config())),
                   default=describe(m.ADPRouter.create(F.Dist(0, 2), F.KVCacheManager(), F.attention_dp_config())),
                   conv=describe(m.ADPRouter.create(
                       F.Dist(0, 2), kv_cache_manager=F.KVCacheManager(),
                       attention_dp_config=F.attention_dp_config(kv_cache_routing_conversation_affinity=True))))
        '''
        for value in ("1", "true"):
            with self.subTest(TRTLLM_ADPROUTER=value):
                out, err = self.run_python(code, {"TRTLLM_ADPROUTER": value, "TRTLLM_ADPROUTER_PRESET": "index"})
                self.assertEqual(out["kv"], ours(needs=False, source="index"))
                self.assertEqual(out["default"], ours("DefaultADPRouter", needs=False, source=None))
                self.assertEqual(out["conv"], ours("ConversationAwareADPRouter", needs=False, source=None))
                self.assertEqual(err, "")

    def test_options_from_the_environment(self):
        code = '''
            F = fakes()
            report(kv=describe(importlib.import_module(MODULE).ADPRouter.create(
                F.Dist(0, 2), F.KVCacheManager(), kv_config())))
        '''
        for env, source in [
            ({}, None),  # the reference: probe
            ({"ADPROUTER_PREFIX_SOURCE": "index"}, "index"),
            ({"TRTLLM_ADPROUTER_PREFIX_SOURCE": "index", "ADPROUTER_PREFIX_SOURCE": "probe"}, "index"),
            ({"TRTLLM_ADPROUTER_PREFIX_SOURCE": "probe", "ADPROUTER_PREFIX_SOURCE": "index"}, "probe"),
            ({"TRTLLM_ADPROUTER_PRESET": "index", "ADPROUTER_PRESET": "reference"}, "index"),
            # An explicit option wins over the preset.
            ({"TRTLLM_ADPROUTER_PRESET": "index", "TRTLLM_ADPROUTER_PREFIX_SOURCE": "probe"}, "probe"),
        ]:
            with self.subTest(**env):
                out, err = self.run_python(code, dict(env, TRTLLM_ADPROUTER="1"))
                self.assertEqual(out["kv"], ours(needs=source != "index", source=source))
                self.assertEqual(err, "")

    def test_module_imported_before_the_hook(self):
        out, err = self.run_python('''
            F = fakes()
            m = importlib.import_module(MODULE)
            before = m.ADPRouter.create(F.Dist(0, 2), F.KVCacheManager(), kv_config())
            import _adprouter_startup
            _adprouter_startup.main()
            _adprouter_startup.main()  # idempotent
            after = m.ADPRouter.create(F.Dist(0, 2), F.KVCacheManager(), kv_config())
            finders = sum(type(f).__name__ == "_Finder" for f in sys.meta_path)
            report(before=describe(before), after=describe(after), finders=finders)
        ''', {"TRTLLM_ADPROUTER": "1", "TRTLLM_ADPROUTER_PRESET": "index"}, hook=False)
        self.assertEqual(out, {"before": "theirs", "after": ours(needs=False, source="index"), "finders": 1})
        self.assertEqual(err, "")

    def test_older_module_path(self):
        out, err = self.run_python('''
            F = fakes()
            try:
                importlib.import_module("tensorrt_llm._torch.pyexecutor.scheduler.adp_router")
                newer = "imported"
            except ModuleNotFoundError as e:
                newer = e.name
            m = importlib.import_module(MODULE)
            report(newer=newer, kv=describe(m.ADPRouter.create(F.Dist(0, 2), F.KVCacheManager(), kv_config())))
        ''', {"TRTLLM_ADPROUTER": "1", "TRTLLM_ADPROUTER_PRESET": "index"}, variant="old_path")
        self.assertEqual(out, {"newer": "tensorrt_llm._torch.pyexecutor.scheduler",
                               "kv": ours(needs=False, source="index")})
        self.assertEqual(err, "")

    # ---- off --------------------------------------------------------------------------------

    _THEIRS = '''
        F = fakes()
        m = importlib.import_module(MODULE)
        r = m.ADPRouter.create(F.Dist(0, 2), F.KVCacheManager(), kv_config())
        report(router=describe(r), adprouter=sorted(k for k in sys.modules if "adprouter" in k.split(".")[0]))
    '''

    def test_disabled(self):
        for value in (None, "", "0", "false", "False", " 0 "):
            with self.subTest(TRTLLM_ADPROUTER=value):
                env = {"TRTLLM_ADPROUTER_PRESET": "index"}
                if value is not None:
                    env["TRTLLM_ADPROUTER"] = value
                out, err = self.run_python(self._THEIRS, env)
                self.assertEqual(out, {"router": "theirs", "adprouter": []})  # not even the hook module
                self.assertEqual(err, "")

    # ---- MPI ranks ------------------------------------------------------------------------------

    def test_mpi_rank_told_after_start(self):
        """An MPI rank whose TRTLLM_ADPROUTER arrives after the interpreter
        started (mpi4py's MPIPoolExecutor(env=...) sets TensorRT-LLM's
        forwarded variables in the worker then) routes with ours; one never
        told keeps TensorRT-LLM's and never imports adprouter."""
        for marker in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"):
            with self.subTest(marker):
                out, err = self.run_python('''
                    import os
                    os.environ.update(TRTLLM_ADPROUTER="1", TRTLLM_ADPROUTER_PRESET="index")
                    F = fakes()
                    m = importlib.import_module(MODULE)
                    report(kv=describe(m.ADPRouter.create(F.Dist(0, 2), F.KVCacheManager(), kv_config())))
                ''', {marker: "0"})
                self.assertEqual(out, {"kv": ours(needs=False, source="index")})
                self.assertEqual(err, "")
        out, err = self.run_python(self._THEIRS, {"OMPI_COMM_WORLD_RANK": "1"})
        self.assertEqual(out, {"router": "theirs", "adprouter": ["_adprouter_startup"]})  # the hook, only
        self.assertEqual(err, "")

    def test_value_not_understood(self):
        out, err = self.run_python(self._THEIRS, {"TRTLLM_ADPROUTER": "yes"})
        self.assertEqual(out["router"], "theirs")
        warned = warnings_in(err)
        self.assertEqual(len(warned), 1, err)
        self.assertIn("TRTLLM_ADPROUTER='yes' is not understood", warned[0])

    def test_trtllm_absent(self):
        out, err = self.run_python('''
            try:
                import tensorrt_llm._torch.pyexecutor.scheduler.adp_router
                missing = None
            except ModuleNotFoundError as e:
                missing = e.name
            report(missing=missing, hooked=any(type(f).__name__ == "_Finder" for f in sys.meta_path),
                   loaded=sorted(k for k in sys.modules if k.split(".")[0] == "tensorrt_llm"))
        ''', {"TRTLLM_ADPROUTER": "1"}, variant=None)
        self.assertEqual(out, {"missing": "tensorrt_llm", "hooked": True, "loaded": []})
        self.assertEqual(err, "")
        out, err = self.run_python('report(loaded="tensorrt_llm" in sys.modules)', {"TRTLLM_ADPROUTER": "1"},
                                   variant=None)
        self.assertEqual((out, err), ({"loaded": False}, ""))

    # ---- create's signature -----------------------------------------------------------------

    def test_newer_signature(self):
        out, err = self.run_python('''
            F = fakes()
            create = importlib.import_module(MODULE).ADPRouter.create
            d = F.Dist(0, 2)
            report(positional=[describe(create(d, flag, F.KVCacheManager(), kv_config())) for flag in (False, True)],
                   keyword=[describe(create(dist=d, has_seq_slot_headroom=flag, kv_cache_manager=F.KVCacheManager(),
                                            attention_dp_config=kv_config())) for flag in (False, True)],
                   default=describe(create(d, True, F.KVCacheManager(), F.attention_dp_config())))
        ''', {"TRTLLM_ADPROUTER": "1"}, variant="headroom")
        self.assertEqual(out, {"positional": [ours(exclude=False), ours(exclude=True)],
                               "keyword": [ours(exclude=False), ours(exclude=True)],
                               "default": ours("DefaultADPRouter", needs=False)})
        self.assertEqual(err, "")

    def test_unknown_argument(self):
        for variant, name in (("dkv", "dkv_enabled"), ("kwargs", "dkv_enabled")):
            with self.subTest(variant):
                out, err = self.run_python('''
                    F = fakes()
                    create = importlib.import_module(MODULE).ADPRouter.create
                    d, kv = F.Dist(0, 2), F.KVCacheManager()
                    unknown = [describe(create(d, kv, kv_config(), dkv_enabled=True)),
                               describe(create(d, kv_cache_manager=kv, attention_dp_config=kv_config(),
                                               dkv_enabled=True))]
                    known = [describe(create(d, kv, kv_config()))]
                    if %r == "dkv":
                        known.append(describe(create(d, kv, kv_config(), None, False)))
                    report(unknown=unknown, known=known)
                ''' % variant, {"TRTLLM_ADPROUTER": "1"}, variant=variant)
                self.assertEqual(out["unknown"], ["theirs", "theirs"])
                self.assertEqual(out["known"], [ours()] * (2 if variant == "dkv" else 1))
                warned = warnings_in(err)
                self.assertEqual(len(warned), 1, err)  # one, though create refused twice
                self.assertIn("got %s" % name, warned[0])
                self.assertIn("using TensorRT-LLM's own router", warned[0])

    # ---- mistakes -----------------------------------------------------------------------------

    def test_unknown_variable(self):
        out, err = self.run_python('''
            F = fakes()
            create = importlib.import_module(MODULE).ADPRouter.create
            report(routers=[describe(create(F.Dist(0, 2), F.KVCacheManager(), kv_config())) for _ in range(2)])
        ''', {"TRTLLM_ADPROUTER": "1", "TRTLLM_ADPROUTER_PRESETT": "index"})
        self.assertEqual(out, {"routers": [ours()] * 2})  # the preset did not apply
        warned = warnings_in(err)
        self.assertEqual(len(warned), 1, err)
        self.assertIn("ignoring TRTLLM_ADPROUTER_PRESETT: no such option", warned[0])

    def test_router_module_without_create(self):
        out, err = self.run_python('''
            m = importlib.import_module(MODULE)
            report(create=hasattr(m.ADPRouter, "create"), imported=MODULE in sys.modules)
        ''', {"TRTLLM_ADPROUTER": "1"}, variant="no_create")
        self.assertEqual(out, {"create": False, "imported": True})
        warned = warnings_in(err)
        self.assertEqual(len(warned), 1, err)
        self.assertIn("could not install into %s" % fake_trtllm.MODULE, warned[0])
        self.assertIn("TensorRT-LLM keeps its own router", warned[0])


if __name__ == "__main__":
    unittest.main()
