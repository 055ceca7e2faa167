"""Kernel tests compile into a temporary cache shared by the session (never ~/.cache)."""

import pytest


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("kernel-cache")


@pytest.fixture(autouse=True)
def _no_user_cache(monkeypatch, cache_dir):
    # A test that forgets cache_dir= must not write into the user's cache.
    monkeypatch.setenv("SLICER_CACHE_DIR", str(cache_dir))
