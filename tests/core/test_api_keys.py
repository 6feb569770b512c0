"""API keys in the system keyring: a real Secret Service where one runs, one clear sentence where none does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import keyring
import pytest
from keyring.backends import fail

from app.core.api_keys import KeyStore

ROOT = Path(__file__).resolve().parents[2]
URL = "http://192.0.2.1:8080/v1"


@pytest.fixture
def no_keyring_service():
    """keyring's own choice on a machine without GNOME Keyring or KWallet: its fail backend."""
    before = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())
    yield
    keyring.set_keyring(before)


def test_without_a_keyring_service_the_key_lasts_the_session_and_the_user_is_told_why(no_keyring_service):
    keys = KeyStore()
    said = keys.save(URL, "sk-session")
    assert said == ("No keyring service is running (on Linux, GNOME Keyring or KWallet keeps keys), so the key is "
                    "kept only until Hearth closes.")
    assert keys.get(URL) == "sk-session"
    assert KeyStore().get(URL) is None  # the next session has nothing: nothing was written anywhere
    keys.forget(URL)
    assert keys.get(URL) is None


ROUND_TRIP = """
import sys
from app.core.api_keys import KeyStore
url = sys.argv[1]
assert KeyStore().save(url, "sk-stored") is None, "not stored"
assert KeyStore().get(url) == "sk-stored", "a new session does not find it"
KeyStore().forget(url)
assert KeyStore().get(url) is None, "forget left it"
print("round trip ok")
"""


@pytest.mark.skipif(not (shutil.which("dbus-run-session") and shutil.which("gnome-keyring-daemon")),
                    reason="needs dbus-run-session and gnome-keyring-daemon (tests/run.sh installs them)")
@pytest.mark.timeout(60)
def test_a_key_saved_in_gnome_keyring_is_found_by_the_next_session_and_forgotten(tmp_path):
    """The Secret Service backend end to end: a private D-Bus session with an unlocked GNOME Keyring."""
    script = ('echo -n test | gnome-keyring-daemon --unlock --components=secrets >/dev/null 2>&1; '
              'sleep 0.5; exec "$@"')
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(ROOT), "LANG": "C.UTF-8"}
    proc = subprocess.run(["dbus-run-session", "--", "sh", "-c", script, "session", sys.executable, "-c", ROUND_TRIP,
                           URL], capture_output=True, text=True, timeout=50, env=env, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == "round trip ok", proc.stdout + proc.stderr


def test_a_key_that_must_outlive_the_session_is_kept_in_a_file_only_the_user_reads(no_keyring_service, tmp_path):
    """#55 E5: without a keyring the window's API server key changed at every restart; editors set up with it
    broke each time."""
    kept = tmp_path / "config" / "server-key.json"
    said = KeyStore(fallback=kept).save("Hearth's own API server", "sk-lasting")
    assert said == (f"As no keyring service is running (on Linux, GNOME Keyring or KWallet keeps keys), the key is "
                    f"kept in {kept}, readable only by you.")
    assert os.stat(kept).st_mode & 0o777 == 0o600
    assert KeyStore(fallback=kept).get("Hearth's own API server") == "sk-lasting"  # the next session has it
    KeyStore(fallback=kept).forget("Hearth's own API server")
    assert KeyStore(fallback=kept).get("Hearth's own API server") is None
