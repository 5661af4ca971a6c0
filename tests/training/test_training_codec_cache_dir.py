"""Where the codec kernels' numba cache goes for an installed Yeto: numba's own choice (beside the source, else its
per-user folder: both kept across state directories) while either is writable, $YETO_HOME/cache/numba only when
neither is (numba would refuse to define a cached kernel). Unwritable folders are made unmakeable (a file in the way):
the tests run as root, for whom permissions do not stop a write."""
from __future__ import annotations

import subprocess
import sys

from yeto.schemas.codecs.base import numba_cache_dir, writable


def test_numba_keeps_its_own_choice_while_the_source_or_the_user_folder_is_writable(tmp_path):
    (tmp_path / "blocked").write_text("")
    package, user, home = tmp_path / "pkg", tmp_path / "user", tmp_path / "home"
    assert numba_cache_dir(str(package), str(user), str(home)) is None                 # a source tree
    assert numba_cache_dir(str(tmp_path / "blocked"), str(user), str(home)) is None    # read-only site-packages
    assert writable(str(user)) and not writable(str(tmp_path / "blocked" / "__pycache__"))


def test_with_neither_writable_the_kernels_cache_under_yeto_home(tmp_path):
    blocked = tmp_path / "blocked"
    blocked.write_text("")
    assert numba_cache_dir(str(blocked), str(blocked / "user"), str(tmp_path / "home")) == str(tmp_path / "home/cache/numba")


def test_an_explicit_numba_cache_dir_is_kept(tmp_path):
    out = subprocess.run([sys.executable, "-c", "import numba, yeto.schemas.codecs; print(numba.config.CACHE_DIR)"],
                         capture_output=True, text=True, timeout=120,
                         env={"NUMBA_CACHE_DIR": str(tmp_path / "mine"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == str(tmp_path / "mine")
