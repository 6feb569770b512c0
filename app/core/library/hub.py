"""Hugging Face: search GGUF repositories and download their files.

Metadata goes through huggingface_hub's HfApi (search, file listing with each
file's LFS SHA-256). Files are fetched from the same `/resolve/` URLs that
hf_hub_download uses, on huggingface_hub's own HTTP session, but with a loop of
our own, because Hearth needs what hf_hub_download does not offer: a progress
callback, cancellation between chunks, a `.part` file that survives a crash
and resumes with a Range request, a free-space check, and verification against
the repository's SHA-256. That plain GET also keeps Xet storage out of the way
(the Hub redirects it to an ordinary HTTP download).

Every failure a user can meet becomes one HearthError sentence: no network,
repository or file not found, gated repository, disk full, checksum mismatch,
cancelled. A file name from a repository never escapes the destination folder.

The endpoint is HF_ENDPOINT (read at call time) or the `endpoint` argument; the
token is the `token` argument, else HF_TOKEN / the user's saved Hugging Face
login, as huggingface_hub resolves it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable
from urllib.parse import urlsplit

from app.core import paths
from app.core.errors import HearthError
from app.core.gguf.names import quant_from_filename, split_part

Progress = Callable[[int, int], None]  # (done_bytes, total_bytes)

DEFAULT_ENDPOINT = "https://huggingface.co"
CHUNK = 1 << 20
RETRIES = 3  # reconnects (with Range) after a dropped connection, per file
PROGRESS_EVERY_S = 0.1
TIMEOUT_S = 30.0
PREFERRED_QUANTS = ("Q4_K_M", "Q4_K_S", "Q5_K_M", "Q4_0", "Q6_K", "Q8_0", "IQ4_XS", "F16", "BF16")


class NetworkError(HearthError):
    """Hugging Face cannot be reached."""


class NotFoundError(HearthError):
    """The repository or the file does not exist (or is private)."""


class GatedError(HearthError):
    """The repository needs an accepted licence and a token."""


class DiskFullError(HearthError):
    """Not enough space in the models folder."""


class ChecksumError(HearthError):
    """A downloaded file does not match the repository's SHA-256."""


class DownloadCancelled(HearthError):
    """The user cancelled; the partial file is kept for a resume."""


class UnsafeFileName(HearthError):
    """A repository file name would land outside the models folder."""


@dataclass
class RemoteFile:
    filename: str
    size: int | None = None
    sha256: str | None = None  # from the repository's LFS pointer; None for small non-LFS files
    quant: str | None = None
    split_index: int | None = None  # 1-based part number of a split GGUF
    split_count: int | None = None


@dataclass
class RemoteRepo:
    repo_id: str
    downloads: int | None = None
    likes: int | None = None
    gated: bool = False
    sha: str | None = None  # the revision's commit
    files: list[RemoteFile] = field(default_factory=list)  # GGUF files only

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class PullResult:
    repo_id: str
    paths: list[Path]  # the first path is what to load (part 1 of a split set)
    bytes_downloaded: int
    verified: bool  # every file's SHA-256 was published and matched
    size_checked: bool = True  # every file's size was published and matched

    def to_dict(self) -> dict:
        return {"repo_id": self.repo_id, "paths": [str(p) for p in self.paths],
                "bytes_downloaded": self.bytes_downloaded, "verified": self.verified,
                "size_checked": self.size_checked}


# --- endpoint, token, errors -------------------------------------------------

def endpoint_url(endpoint: str | None = None) -> str:
    return (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def _api(endpoint: str | None, token: str | None):
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint_url(endpoint), token=token)


def _is_network_error(exc: BaseException) -> bool:
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & {"TransportError", "ConnectionError", "TimeoutException", "OfflineModeIsEnabled",
                         "ConnectTimeout", "ReadTimeout"})


def _translate(exc: BaseException, repo_id: str, filename: str | None = None, endpoint: str | None = None
               ) -> HearthError:
    """Map huggingface_hub / HTTP exceptions to one sentence."""
    from huggingface_hub import errors as hf

    if isinstance(exc, HearthError):
        return exc
    if isinstance(exc, hf.GatedRepoError):
        return GatedError(f"{repo_id} is a gated repository: accept its licence on the Hugging Face website, "
                          "then pass a token with access (--token or the HF_TOKEN environment variable).")
    if isinstance(exc, hf.RevisionNotFoundError):
        return NotFoundError(f"The requested revision of {repo_id} does not exist.")
    if isinstance(exc, hf.RemoteEntryNotFoundError):
        return NotFoundError(f"{repo_id} has no file named {filename!r}." if filename
                             else f"A file of {repo_id} was not found.")
    if isinstance(exc, hf.RepositoryNotFoundError):
        return NotFoundError(f"The repository {repo_id} was not found on Hugging Face (or it is private and "
                             "needs a token).")
    if isinstance(exc, hf.HfHubHTTPError):
        status = getattr(getattr(exc, "response", None), "status_code", None)
        return HearthError(f"Hugging Face answered with an error (HTTP {status}) for {repo_id}; try again later.")
    if _is_network_error(exc):
        return _unreachable(endpoint)
    if isinstance(exc, ValueError) and "repo" in str(exc).lower():
        return NotFoundError(f"'{repo_id}' is not a valid repository name (expected owner/name).")
    return HearthError(f"Talking to Hugging Face failed: {exc}")


def _unreachable(endpoint: str | None) -> NetworkError:
    return NetworkError(f"Cannot reach Hugging Face at {endpoint_url(endpoint)}; check the network "
                        "connection (or HF_ENDPOINT).")


def _check_reachable(endpoint: str | None) -> None:
    """Fail in seconds without a network: huggingface_hub's search retries for about 25 s before giving up."""
    url = urlsplit(endpoint_url(endpoint))
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=5).close()
    except OSError:
        raise _unreachable(endpoint) from None


def _check_repo_id(repo_id: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9][\w.\-]*/[\w.\-]+", repo_id or "") or ".." in repo_id:
        raise NotFoundError(f"'{repo_id}' is not a valid repository name (expected owner/name).")


# --- search and listing ------------------------------------------------------

def _remote_file(sibling) -> RemoteFile:
    lfs = getattr(sibling, "lfs", None)
    name = sibling.rfilename
    split = split_part(PurePosixPath(name).name)
    return RemoteFile(
        filename=name,
        size=(lfs.size if lfs else None) or getattr(sibling, "size", None),
        sha256=lfs.sha256 if lfs else None,
        quant=quant_from_filename(name),
        split_index=split.index if split else None,
        split_count=split.count if split else None,
    )


def _repo_from_info(info) -> RemoteRepo:
    files = [_remote_file(s) for s in (info.siblings or []) if s.rfilename.lower().endswith(".gguf")]
    return RemoteRepo(repo_id=info.id, downloads=info.downloads, likes=info.likes, gated=bool(info.gated),
                      sha=info.sha, files=files)


def repo_files(repo_id: str, revision: str | None = None, token: str | None = None,
               endpoint: str | None = None, gguf_only: bool = True) -> RemoteRepo:
    """A repository's GGUF files (or all its files) with size, SHA-256 and quantization type."""
    _check_repo_id(repo_id)
    try:
        info = _api(endpoint, token).model_info(repo_id, revision=revision, files_metadata=True, timeout=TIMEOUT_S)
    except Exception as exc:
        raise _translate(exc, repo_id, endpoint=endpoint) from None
    repo = _repo_from_info(info)
    if not gguf_only:
        repo.files = [_remote_file(s) for s in (info.siblings or [])]
    return repo


def search(query: str, limit: int = 20, with_files: bool = True, token: str | None = None,
           endpoint: str | None = None) -> list[RemoteRepo]:
    """Repositories with GGUF files matching `query`, most downloaded first.

    with_files: also list each repository's GGUF files with sizes (one request per repository).
    """
    _check_reachable(endpoint)
    try:
        found = list(_api(endpoint, token).list_models(search=query or None, filter="gguf", sort="downloads",
                                                       limit=limit))
    except Exception as exc:
        raise _translate(exc, query, endpoint=endpoint) from None
    repos = [_repo_from_info(m) for m in found]
    if with_files and repos:
        def detail(repo: RemoteRepo) -> RemoteRepo:
            try:
                full = repo_files(repo.repo_id, token=token, endpoint=endpoint)
            except (NotFoundError, GatedError):
                return repo
            full.downloads = repo.downloads if repo.downloads is not None else full.downloads
            full.likes = repo.likes if repo.likes is not None else full.likes
            return full

        with ThreadPoolExecutor(max_workers=4) as pool:
            repos = list(pool.map(detail, repos))
    return repos


def choose_files(repo: RemoteRepo, filename: str | None = None, quant: str | None = None) -> list[RemoteFile]:
    """The files to fetch: the named file or the quant asked for (or a sensible default), with all parts of a split set."""
    files = repo.files
    if not files:
        raise NotFoundError(f"{repo.repo_id} has no GGUF files.")
    if filename:
        chosen = next((f for f in files if f.filename == filename), None)
        if chosen is None:
            chosen = next((f for f in files if PurePosixPath(f.filename).name == filename), None)
        if chosen is None:
            raise NotFoundError(f"{repo.repo_id} has no GGUF file named {filename!r}.")
    else:
        wanted = [quant.upper()] if quant else list(PREFERRED_QUANTS)
        chosen = None
        for q in wanted:
            chosen = next((f for f in files if (f.quant or "").upper() == q and (f.split_index or 1) == 1), None)
            if chosen:
                break
        if chosen is None:
            if quant:
                have = sorted({f.quant for f in files if f.quant})
                raise NotFoundError(f"{repo.repo_id} has no {quant.upper()} GGUF file"
                                    + (f" (it has {', '.join(have)})." if have else "."))
            chosen = min(files, key=lambda f: f.size or 0)
    if chosen.split_count:
        base = split_part(chosen.filename).base
        parts = sorted((f for f in files if f.split_count == chosen.split_count
                        and split_part(f.filename) and split_part(f.filename).base == base),
                       key=lambda f: f.split_index)
        if len(parts) != chosen.split_count:
            raise NotFoundError(f"{repo.repo_id} lists only {len(parts)} of the {chosen.split_count} parts of "
                                f"{PurePosixPath(chosen.filename).name}.")
        return parts
    return [chosen]


# --- download ----------------------------------------------------------------

def safe_destination(dest_dir: Path, filename: str) -> Path:
    """Where a repository file lands inside dest_dir; refuses names that would escape it."""
    parts = PurePosixPath(filename.replace("\\", "/")).parts
    if (not parts or filename.startswith(("/", "\\")) or any(p in ("..", ".", "") for p in parts)
            or "\0" in filename or re.match(r"^[A-Za-z]:", filename)):
        raise UnsafeFileName(f"Refusing the repository file name {filename!r}: it would be saved outside "
                             "the models folder.")
    root = Path(dest_dir).resolve()
    target = root.joinpath(*parts).resolve()
    if not target.is_relative_to(root):
        raise UnsafeFileName(f"Refusing the repository file name {filename!r}: it would be saved outside "
                             "the models folder.")
    return target


def repo_folder(repo_id: str) -> Path:
    """The folder of the models directory where a repository's files go."""
    _check_repo_id(repo_id)
    return paths.models_dir() / repo_id.replace("/", "__")


class _Meter:
    """Sums bytes over files and calls progress at most every PROGRESS_EVERY_S (and at the end)."""

    def __init__(self, total: int, progress: Progress | None):
        self.total, self.done, self.progress = total, 0, progress
        self._last = 0.0

    def add(self, n: int, force: bool = False) -> None:
        self.done += n
        now = time.monotonic()
        if self.progress and (force or now - self._last >= PROGRESS_EVERY_S):
            self._last = now
            self.progress(self.done, self.total)


def _disk_error(exc: OSError, folder: Path) -> HearthError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return DiskFullError(f"The disk is full: there is no room left in {folder} for the download "
                             "(the partial file is kept; free some space and run the same command to resume).")
    return HearthError(f"Cannot write to {folder}: {exc.strerror or exc}.")


def _hash_existing(path: Path, cancel: threading.Event | None) -> "hashlib._Hash":
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK * 8):
            if cancel is not None and cancel.is_set():
                raise DownloadCancelled("Download cancelled; run it again to resume.")
            digest.update(chunk)
    return digest


def _fetch_one(url: str, headers: dict, rf: RemoteFile, target: Path, meter: _Meter,
               cancel: threading.Event | None, repo_id: str, endpoint: str | None) -> int:
    """Download one file to target via target.part, resuming and verifying. Returns bytes fetched."""
    from huggingface_hub.utils import get_session, hf_raise_for_status

    part = target.with_name(target.name + ".part")
    marker = target.with_name(target.name + ".part.json")
    expect = {"sha256": rf.sha256, "size": rf.size}
    if part.exists() and _read_marker(marker) != expect:
        part.unlink()  # the remote file changed since the partial download: start over
    target.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(expect), encoding="utf-8")
    have = part.stat().st_size if part.exists() else 0
    if rf.size is not None and have > rf.size:
        part.unlink()
        have = 0
    digest = _hash_existing(part, cancel) if have else hashlib.sha256()
    meter.add(have, force=True)
    fetched = 0
    attempts = 0
    session = get_session()
    while rf.size is None or have < rf.size:
        req_headers = dict(headers)
        if have:
            req_headers["Range"] = f"bytes={have}-"
        try:
            with session.stream("GET", url, headers=req_headers, timeout=TIMEOUT_S, follow_redirects=True) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    hf_raise_for_status(resp)
                if have and resp.status_code != 206:
                    # The server ignored the Range: take the whole file again.
                    have, digest = 0, hashlib.sha256()
                    part.unlink(missing_ok=True)
                with part.open("ab") as out:
                    for chunk in resp.iter_bytes():
                        if cancel is not None and cancel.is_set():
                            raise DownloadCancelled("Download cancelled; the partial file is kept and the same "
                                                    "command resumes it.")
                        try:
                            out.write(chunk)
                        except OSError as exc:
                            raise _disk_error(exc, target.parent) from None
                        digest.update(chunk)
                        have += len(chunk)
                        fetched += len(chunk)
                        meter.add(len(chunk))
            if rf.size is None:
                break
            if have < rf.size:
                raise ConnectionError("the connection closed before the end of the file")
        except HearthError:
            raise
        except Exception as exc:
            connect_failed = {"ConnectError", "ConnectTimeout"} & {c.__name__ for c in type(exc).__mro__}
            if _is_network_error(exc) and not connect_failed and attempts < RETRIES:
                attempts += 1
                time.sleep(0.2 * attempts)
                continue
            if _is_network_error(exc) and have > 0:
                raise NetworkError(f"The connection to Hugging Face broke while downloading {target.name}; "
                                   "the partial file is kept and the same command resumes it.") from None
            raise _translate(exc, repo_id, rf.filename, endpoint) from None
    if rf.sha256 and digest.hexdigest() != rf.sha256.lower():
        part.unlink(missing_ok=True)
        marker.unlink(missing_ok=True)
        raise ChecksumError(f"{target.name} does not match the SHA-256 published by {repo_id}; the damaged "
                            "download was deleted. Run the command again to download it afresh.")
    if rf.size is not None and have != rf.size:
        part.unlink(missing_ok=True)
        raise ChecksumError(f"{target.name} has {have:,} bytes instead of the {rf.size:,} that {repo_id} lists; "
                            "the damaged download was deleted.")
    os.replace(part, target)
    marker.unlink(missing_ok=True)
    meter.add(0, force=True)
    return fetched


def _read_marker(marker: Path) -> dict | None:
    try:
        return json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _already_complete(target: Path, rf: RemoteFile, cancel: threading.Event | None) -> bool:
    if not target.exists() or (rf.size is not None and target.stat().st_size != rf.size):
        return False
    return not rf.sha256 or _hash_existing(target, cancel).hexdigest() == rf.sha256.lower()


def download_files(repo_id: str, filenames: list[str], dest_dir: str | Path, progress: Progress | None = None,
                   cancel: threading.Event | None = None, token: str | None = None, revision: str = "main",
                   endpoint: str | None = None, remote: RemoteRepo | None = None) -> list[Path]:
    """Download the named files of a repository into dest_dir (keeping their sub-folders), verified.

    Resumes `.part` files left by an earlier attempt; checks free space first; verifies each file
    against the repository's SHA-256 (LFS files) or size. Works for any file type (convert uses it
    for safetensors and configs). `remote` skips the metadata request when the caller has it.
    """
    return _download(repo_id, filenames, Path(dest_dir), progress, cancel, token, revision, endpoint, remote)[0]


def _download(repo_id: str, filenames: list[str], dest: Path, progress: Progress | None,
              cancel: threading.Event | None, token: str | None, revision: str, endpoint: str | None,
              remote: RemoteRepo | None) -> tuple[list[Path], int]:
    _check_repo_id(repo_id)
    targets = [safe_destination(dest, name) for name in filenames]
    if remote is None or any(name not in {f.filename for f in remote.files} for name in filenames):
        remote = repo_files(repo_id, revision, token, endpoint, gguf_only=False)
    by_name = {f.filename: f for f in remote.files}
    missing = [name for name in filenames if name not in by_name]
    if missing:
        raise NotFoundError(f"{repo_id} has no file named {missing[0]!r}.")
    wanted = [by_name[name] for name in filenames]

    made = _missing_folders(dest)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        return _download_into(repo_id, wanted, targets, dest, progress, cancel, token, revision, endpoint, remote)
    except BaseException:
        _remove_if_empty(made)  # a refused or failed download leaves no empty folders behind
        raise


def _missing_folders(folder: Path) -> list[Path]:
    """The folders that mkdir(parents=True) would create for `folder`, deepest first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _remove_if_empty(folders: list[Path]) -> None:
    for folder in folders:
        try:
            folder.rmdir()  # only succeeds on an empty folder
        except OSError:
            return


def _download_into(repo_id, wanted, targets, dest, progress, cancel, token, revision, endpoint, remote):
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    todo = []
    for rf, target in zip(wanted, targets):
        if not _already_complete(target, rf, cancel):
            todo.append((rf, target))
    total = sum(rf.size or 0 for rf, _ in todo)
    needed = total - sum(_part_size(t) for _, t in todo)
    free = shutil.disk_usage(dest).free
    if needed > free:
        raise DiskFullError(f"Not enough disk space in {dest}: the download needs {needed / 2**30:.2f} GB but "
                            f"only {free / 2**30:.2f} GB are free.")
    headers = build_hf_headers(token=token)
    meter = _Meter(total, progress)
    rev = remote.sha or revision
    fetched = 0
    for rf, target in todo:
        url = hf_hub_url(repo_id, rf.filename, revision=rev, endpoint=endpoint_url(endpoint))
        fetched += _fetch_one(url, headers, rf, target, meter, cancel, repo_id, endpoint)
    return targets, fetched


def _part_size(target: Path) -> int:
    part = target.with_name(target.name + ".part")
    return part.stat().st_size if part.exists() else 0


def pull(repo_id: str, filename: str | None = None, quant: str | None = None, dest_dir: str | Path | None = None,
         progress: Progress | None = None, cancel: threading.Event | None = None, token: str | None = None,
         endpoint: str | None = None) -> PullResult:
    """Download a GGUF model (a file, a quant type, or the default choice; whole split sets) into the models folder."""
    repo = repo_files(repo_id, token=token, endpoint=endpoint)
    chosen = choose_files(repo, filename, quant)
    dest = Path(dest_dir) if dest_dir else repo_folder(repo_id)
    targets, fetched = _download(repo_id, [f.filename for f in chosen], dest, progress, cancel, token, "main",
                                 endpoint, repo)
    return PullResult(repo_id=repo_id, paths=targets, bytes_downloaded=fetched,
                      verified=all(f.sha256 for f in chosen), size_checked=all(f.size is not None for f in chosen))


def recommended_models() -> list[dict]:
    """The curated list shown by `hearth models search` without a query (resources/recommended_models.json)."""
    from app.core.resources import resource_path

    path = resource_path("recommended_models.json")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise HearthError(f"The list of recommended models ({path}) is missing or damaged; reinstall Hearth.") \
            from None
    return data["models"] if isinstance(data, dict) else data
