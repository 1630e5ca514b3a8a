#!/usr/bin/env python3
"""Unit tests of scripts/perf-ab.sh (this tree and another commit timed
side by side) with stand-ins for meson and ninja: the "perf binary" each
build gets writes a -J file whose times depend on the build, so the
summary's new / old is known; a failed build or sweep must fail the run.

Speaks TAP (meson's `protocol: 'tap'`). Run by hand:
python3 test/scripts/test_perf_ab.py
"""

import os
import subprocess
import sys
import tarfile
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, HERE)
import tap  # noqa: E402

# meson setup DIR SRC ...: a perf binary in DIR that writes rows 1 and 8 at
# times scaled by the build (old 10 us a row, new 8), or fails where the
# source tree holds a file named FAIL_SWEEP. FAIL_SETUP in the source: the
# configure fails.
FAKE_MESON = r"""#!/bin/bash
dir=$2 src=$3
[ -e "$src/FAIL_SETUP" ] && exit 1
mkdir -p "$dir/perf"
us=8; case "$dir" in */old) us=10;; esac
fail=0; [ -e "$src/FAIL_SWEEP" ] && fail=1
cat > "$dir/perf/dcp_a2a_lse_reduce_perf" <<EOS
#!/bin/bash
[ $fail = 1 ] && exit 3
while [ \$# -gt 0 ]; do
  [ "\$1" = -J ] && echo '{"results": [{"rows": 1, "size": 1024, "out_of_place": {"time": '$us'}},
    {"rows": 8, "size": 8192, "out_of_place": {"time": '$((us * 8))'}}]}' > "\$2"
  shift
done
EOS
chmod +x "$dir/perf/dcp_a2a_lse_reduce_perf"
"""


class PerfAb(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        t = self.tmp.name
        os.makedirs(os.path.join(t, "bin"))
        for name, text in (("meson", FAKE_MESON), ("ninja", "#!/bin/bash\nexit 0\n")):
            path = os.path.join(t, "bin", name)
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o755)
        self.old_src = os.path.join(t, "old-src")
        os.makedirs(self.old_src)
        self.tar = os.path.join(t, "old.tar")

    def tearDown(self):
        self.tmp.cleanup()

    def run_ab(self, marker=None):
        if marker:
            open(os.path.join(self.old_src, marker), "w").close()
        with tarfile.open(self.tar, "w") as tar:
            tar.add(self.old_src, arcname=".")
        env = dict(os.environ, PATH=os.path.join(self.tmp.name, "bin") + os.pathsep + os.environ["PATH"])
        logs = os.path.join(self.tmp.name, "logs")
        r = subprocess.run([os.path.join(ROOT, "scripts", "perf-ab.sh"), self.tar, logs, "-a 1;-b 2", "2"],
                           env=env, capture_output=True, text=True, timeout=60)
        return r, logs

    def test_summary_gives_new_over_old_per_sweep_and_row(self):
        r, logs = self.run_ab()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        summary = open(os.path.join(logs, "summary.txt")).read()
        self.assertEqual(summary.count("sweep "), 2, summary)
        rows = [line.split() for line in summary.splitlines() if not line.startswith("sweep")]
        self.assertEqual([(row[0], row[3]) for row in rows], [("1", "0.800"), ("8", "0.800")] * 2, summary)
        for name in ("old1-0", "new1-0", "old2-1", "new2-1"):
            self.assertTrue(os.path.exists(os.path.join(logs, name + ".json")), name)

    def test_a_failed_build_fails_the_run(self):
        r, _ = self.run_ab("FAIL_SETUP")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("FAIL  old: build", r.stdout)

    def test_a_failed_sweep_fails_the_run(self):
        r, _ = self.run_ab("FAIL_SWEEP")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("FAIL  old round 1 sweep 0", r.stdout)


if __name__ == "__main__":
    sys.exit(tap.run_module(__name__))
