"""API keys for remote servers, kept in the operating system's keyring (never in settings files).

The `keyring` package talks to the Keychain on macOS, the Credential Locker on Windows and the
Secret Service (GNOME Keyring, KWallet) on Linux. Where none runs (a headless server, CI), keyring
raises instead of storing: then the key is kept for this session only and the caller gets one
sentence to show, so connecting still works and nothing is written to disk behind the user's back.
"""

from __future__ import annotations

SERVICE = "Hearth remote servers"


def _keyring():
    """The keyring module, or None where it is not installed (it is a dependency; be lenient anyway)."""
    try:
        import keyring
    except ImportError:
        return None
    return keyring


class KeyStore:
    """Keys by server URL (or another name: MCP servers' secrets, app/tools/server_secrets.py): the session's
    own copy first, then the system keyring, under `service`."""

    def __init__(self, service: str = SERVICE):
        self.service = service
        self._session: dict[str, str] = {}

    def get(self, url: str) -> str | None:
        if url in self._session:
            return self._session[url]
        keyring = _keyring()
        if keyring is None:
            return None
        try:
            return keyring.get_password(self.service, url)
        except Exception:  # keyring.errors.KeyringError and the backends' own errors: no stored key
            return None

    def keep_for_session(self, url: str, key: str) -> None:
        """Keep key until Hearth closes, without storing it anywhere."""
        self._session[url] = key

    def save(self, url: str, key: str) -> str | None:
        """Keep key for url; None when the keyring stored it, else the sentence that says why not."""
        self.keep_for_session(url, key)
        keyring = _keyring()
        if keyring is None:
            return ("The keyring package is not installed, so the key is kept only until Hearth closes "
                    "(pip install keyring stores it).")
        try:
            keyring.set_password(self.service, url, key)
        except Exception as exc:
            if _no_service(exc):
                # keyring's own words ("no recommended backend was available") name its internals, not the fix.
                return ("No keyring service is running (on Linux, GNOME Keyring or KWallet keeps keys), so the key "
                        "is kept only until Hearth closes.")
            return (f"The system keyring did not store the key ({_reason(exc)}), so it is kept only until "
                    "Hearth closes.")
        return None

    def forget(self, url: str) -> None:
        self._session.pop(url, None)
        keyring = _keyring()
        if keyring is None:
            return
        try:
            keyring.delete_password(self.service, url)
        except Exception:  # nothing stored, or no keyring: nothing to forget there
            pass


def _no_service(exc: Exception) -> bool:
    """keyring found no backend to use: its fail backend answered (no Secret Service, no KWallet)."""
    try:
        from keyring.errors import NoKeyringError
    except ImportError:
        return False
    return isinstance(exc, NoKeyringError)


def _reason(exc: Exception) -> str:
    """keyring's errors are paragraphs; the first clause says enough."""
    text = str(exc).split(".")[0].strip() or type(exc).__name__
    return text[0].lower() + text[1:]
