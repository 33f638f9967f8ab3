"""The binding's ctypes structs have the layouts of include/adprouter.h: a C
program compiled against the header prints every field's offset and every
struct's size, and each ctypes struct must match field for field. Skipped
without a C compiler or without the header (an installed package's tests).
"""

import ctypes
import os
import re
import shutil
import subprocess
import tempfile
import unittest

from adprouter import _abi, _receipt

HERE = os.path.dirname(os.path.abspath(__file__))
HEADERS = os.path.join(os.path.dirname(os.path.dirname(HERE)), "include")

# C struct name -> the binding's ctypes struct.
STRUCTS = {
    "adpr_rank_state": _abi.RankStateC,
    "adpr_request": _abi.RequestC,
    "adpr_batch": _abi.Batch,
    "adpr_route_result": _abi.Result,
    "adpr_stats": _abi.Stats,
    "adpr_rank_stats": _abi.RankStats,
    "adpr_hot_group": _abi.HotGroup,
    "adpr_option": _abi.Option,
    "adpr_memory_info": _abi.MemoryInfo,
    "adpr_kv_shape": _abi.KVShape,
    "adpr_kv_budget": _abi.KVBudget,
    "adpr_receipt": _abi.ReceiptC,
    "adpr_candidate": _abi.CandidateC,
    "adpr_binding": _abi.BindingC,
}

# Header macro prefix -> the binding's names, indexed by the macro's value.
CODES = {
    "ADPR_REASON_": _receipt.REASONS,
    "ADPR_EXCLUDED_": _receipt.EXCLUSIONS,
}


@unittest.skipUnless(os.path.exists(os.path.join(HEADERS, "adprouter.h")), "no include/adprouter.h")
class LayoutTest(unittest.TestCase):
    def test_every_struct_is_checked(self):
        structs = {v for v in vars(_abi).values()
                   if isinstance(v, type) and issubclass(v, ctypes.Structure) and v is not ctypes.Structure}
        self.assertEqual(structs - set(STRUCTS.values()), set(), "ctypes structs of _abi missing from STRUCTS")

    def test_ctypes_structs_match_the_header(self):
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if not cc:
            self.skipTest("no C compiler")
        lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "adprouter.h"', "int main(void) {"]
        for name, st in STRUCTS.items():
            lines.append('printf("%s size %%zu\\n", sizeof(%s));' % (name, name))
            for field, _ in st._fields_:
                lines.append('printf("%s.%s %%zu\\n", offsetof(%s, %s));' % (name, field, name, field))
        for prefix, names in CODES.items():
            for value, name in enumerate(names):
                macro = prefix + (name or "none").upper()
                lines.append('printf("%s %%d\\n", (int)%s);' % (macro, macro))
        lines.append("return 0; }")
        tmp = tempfile.mkdtemp(prefix="adpr-layout-")
        try:
            src, exe = os.path.join(tmp, "layout.c"), os.path.join(tmp, "layout")
            with open(src, "w") as f:
                f.write("\n".join(lines))
            proc = subprocess.run([cc, "-I" + HEADERS, "-o", exe, src], capture_output=True, text=True)
            self.assertEqual(proc.returncode, 0, "a ctypes field the header lacks?\n" + proc.stderr)
            got = dict(line.rsplit(" ", 1) for line in subprocess.check_output([exe], text=True).splitlines())
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        with open(os.path.join(HEADERS, "adprouter.h")) as f:
            header = f.read()
        for prefix, names in CODES.items():
            for value, name in enumerate(names):
                macro = prefix + (name or "none").upper()
                self.assertEqual(int(got[macro]), value, macro)
            self.assertEqual(len(re.findall(r"^#define %s\w+ " % prefix, header, re.M)), len(names),
                             "a %s* macro the binding does not name" % prefix)
        for name, st in STRUCTS.items():
            self.assertEqual(int(got[name + " size"]), ctypes.sizeof(st), name)
            for field, _ in st._fields_:
                self.assertEqual(int(got[name + "." + field]), getattr(st, field).offset, name + "." + field)


if __name__ == "__main__":
    unittest.main()
