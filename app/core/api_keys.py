"""API keys for remote servers, kept in the operating system's keyring (never in settings files).

The `keyring` package talks to the Keychain on macOS, the Credential Locker on Windows and the
Secret Service (GNOME Keyring, KWallet) on Linux. Where none runs (a headless server, CI), keyring
raises instead of storing: then the key is kept for this session only and the caller gets one
sentence to show, so connecting still works and nothing is written to disk behind the user's back. A key
that must outlive the session (the window's own API server's: editors set up with it broke at every restart,
#55 E5) names a fallback file instead: written readable by the user alone (0600), and said where.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

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

    def __init__(self, service: str = SERVICE, fallback: Path | None = None):
        """fallback: a file for keys the keyring cannot keep (0600), where they must outlive the session."""
        self.service = service
        self.fallback = Path(fallback) if fallback else None
        self._session: dict[str, str] = {}

    def get(self, url: str) -> str | None:
        if url in self._session:
            return self._session[url]
        keyring = _keyring()
        try:
            stored = keyring.get_password(self.service, url) if keyring is not None else None
        except Exception:  # keyring.errors.KeyringError and the backends' own errors: no stored key
            stored = None
        return stored or self._from_file().get(url)

    def keep_for_session(self, url: str, key: str) -> None:
        """Keep key until Hearth closes, without storing it anywhere."""
        self._session[url] = key

    def save(self, url: str, key: str) -> str | None:
        """Keep key for url; None when the keyring stored it, else the sentence that says why not."""
        self.keep_for_session(url, key)
        keyring = _keyring()
        if keyring is None:
            why = "the keyring package is not installed"
        else:
            try:
                keyring.set_password(self.service, url, key)
                return None
            except Exception as exc:
                # keyring's own words ("no recommended backend was available") name its internals, not the fix.
                why = ("no keyring service is running (on Linux, GNOME Keyring or KWallet keeps keys)"
                       if _no_service(exc) else f"the system keyring did not store the key ({_reason(exc)})")
        if self.fallback is not None:
            try:
                self._to_file(url, key)
                return f"As {why}, the key is kept in {self.fallback}, readable only by you."
            except OSError as exc:
                why += f", and {self.fallback} could not be written ({exc.strerror or exc})"
        return f"{why[0].upper()}{why[1:]}, so the key is kept only until Hearth closes."

    def _from_file(self) -> dict:
        if self.fallback is None or not self.fallback.is_file():
            return {}
        try:
            kept = json.loads(self.fallback.read_text(encoding="utf-8")[:1 << 16])
        except (OSError, ValueError):
            return {}
        return {k: v for k, v in kept.items() if isinstance(v, str)} if isinstance(kept, dict) else {}

    def _to_file(self, url: str, key: str | None) -> None:
        """The file with this key set (or, None, taken out): made 0600 before a byte of it is written."""
        kept = {k: v for k, v in self._from_file().items() if k != url}
        if key is not None:
            kept[url] = key
        self.fallback.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.fallback.with_name(self.fallback.name + ".tmp")
        handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(kept, out)
        os.chmod(temporary, 0o600)  # where it existed before with other bits
        os.replace(temporary, self.fallback)

    def forget(self, url: str) -> None:
        self._session.pop(url, None)
        if url in self._from_file():
            try:
                self._to_file(url, None)
            except OSError:
                pass
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
