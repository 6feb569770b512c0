"""A real local HTTP server with the Hugging Face Hub's URL layout, for download tests.

Point huggingface_hub at it with HF_ENDPOINT or the `endpoint` argument. It
serves what huggingface_hub 2.x asks for:
- GET /api/models?search=&filter=&sort=&limit=   search (a JSON list)
- GET /api/models/{owner}/{name}[/revision/{rev}]?blobs=true   model info with
  siblings (rfilename, size, blobId, lfs {sha256, size, pointerSize})
- GET/HEAD /{owner}/{name}/resolve/{rev}/{path}   the file, with Range (206 +
  Content-Range), ETag, X-Repo-Commit, X-Linked-Etag / X-Linked-Size for LFS
  files and no X-Xet-Hash (so no client tries Xet storage)
- errors as the Hub sends them: 401 + X-Error-Code RepoNotFound, 404 +
  EntryNotFound, 401/403 + GatedRepo.
Test switches: `drop_after[filename] = n` sends n bytes of the next GET of that
file, then cuts the connection (once); a repository with `wrong_sha=True`
publishes a SHA-256 that does not match its files. Every request is recorded
in `requests` (method, path, Range header, Authorization header).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class FakeRepo:
    files: dict[str, bytes]
    downloads: int = 0
    likes: int = 0
    gated: bool = False
    wrong_sha: bool = False
    lfs: bool = True  # files counted as LFS (sha256 published); small text files are not

    def sha256(self, name: str) -> str:
        if self.wrong_sha:
            return hashlib.sha256(b"something else" + name.encode()).hexdigest()
        return hashlib.sha256(self.files[name]).hexdigest()


@dataclass
class Recorded:
    method: str
    path: str
    range: str | None
    authorization: str | None


@dataclass
class FakeHub:
    repos: dict[str, FakeRepo] = field(default_factory=dict)
    token: str = "hf_good_token"  # the token that opens gated repositories
    drop_after: dict[str, int] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)

    def start(self) -> "FakeHub":
        hub = self

        class Handler(_Handler):
            state = hub

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="fake-hub", daemon=True)
        self.thread.start()
        return self

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def file_requests(self, name: str) -> list[Recorded]:
        return [r for r in self.requests if "/resolve/" in r.path and r.path.endswith("/" + name)]


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        pass  # connections cut on purpose (drop_after) or by clients that went away


class _Handler(BaseHTTPRequestHandler):
    state: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    # --- plumbing ---------------------------------------------------------
    def _record(self) -> None:
        self.state.requests.append(Recorded(self.command, unquote(urlparse(self.path).path),
                                            self.headers.get("Range"), self.headers.get("Authorization")))

    def _json(self, data, status: int = 200, headers: dict | None = None) -> None:
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: str, message: str) -> None:
        self._json({"error": message}, status, {"X-Error-Code": code, "X-Error-Message": message})

    def _authorized(self, repo: FakeRepo) -> bool:
        return not repo.gated or self.headers.get("Authorization") == f"Bearer {self.state.token}"

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        self._record()
        url = urlparse(self.path)
        path = unquote(url.path)
        if path == "/api/models":
            return self._search(parse_qs(url.query))
        if path.startswith("/api/models/"):
            repo_id = path[len("/api/models/"):].split("/revision/")[0]
            return self._info(repo_id)
        if "/resolve/" in path:
            repo_id, rest = path.lstrip("/").split("/resolve/", 1)
            _, _, filename = rest.partition("/")
            return self._file(repo_id, filename)
        self._error(404, "NotFound", "Not found")

    # --- endpoints ----------------------------------------------------------
    def _summary(self, repo_id: str, repo: FakeRepo) -> dict:
        return {"id": repo_id, "modelId": repo_id, "author": repo_id.split("/")[0], "sha": COMMIT,
                "downloads": repo.downloads, "likes": repo.likes, "gated": "manual" if repo.gated else False,
                "private": False, "tags": ["gguf"], "library_name": "gguf",
                "lastModified": "2025-01-01T00:00:00.000Z"}

    def _search(self, query: dict) -> None:
        needle = (query.get("search") or [""])[0].lower()
        limit = int((query.get("limit") or ["1000"])[0])
        found = [(rid, r) for rid, r in self.state.repos.items() if needle in rid.lower()]
        found.sort(key=lambda item: -item[1].downloads)
        self._json([{**self._summary(rid, r), "siblings": [{"rfilename": n} for n in r.files]}
                    for rid, r in found[:limit]])

    def _info(self, repo_id: str) -> None:
        repo = self.state.repos.get(repo_id)
        if repo is None:
            return self._error(401, "RepoNotFound", "Repository not found")
        siblings = []
        for name, data in repo.files.items():
            sib = {"rfilename": name, "size": len(data), "blobId": hashlib.sha1(data).hexdigest()}
            if repo.lfs:
                sib["lfs"] = {"sha256": repo.sha256(name), "size": len(data), "pointerSize": 134}
            siblings.append(sib)
        self._json({**self._summary(repo_id, repo), "siblings": siblings})

    def _file(self, repo_id: str, filename: str) -> None:
        repo = self.state.repos.get(repo_id)
        if repo is None:
            return self._error(401, "RepoNotFound", "Repository not found")
        if not self._authorized(repo):
            status = 403 if self.headers.get("Authorization") else 401
            return self._error(status, "GatedRepo", "Access to this model is restricted; you must be authenticated "
                                                    "and have accepted its conditions.")
        data = repo.files.get(filename)
        if data is None:
            return self._error(404, "EntryNotFound", "Entry not found")
        start = 0
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            start = int(rng[len("bytes="):].split("-")[0] or 0)
        body = data[start:]
        self.send_response(206 if start else 200)
        etag = repo.sha256(filename) if repo.lfs else hashlib.sha1(data).hexdigest()
        self.send_header("ETag", f'"{etag}"')
        self.send_header("X-Repo-Commit", COMMIT)
        if repo.lfs:
            self.send_header("X-Linked-Etag", f'"{etag}"')
            self.send_header("X-Linked-Size", str(len(data)))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        if self.command == "HEAD":
            return
        cut = self.state.drop_after.pop(filename, None) if self.command == "GET" else None
        if cut is not None:
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)  # the peer sees the body end early: a dropped connection
            return
        self.wfile.write(body)
