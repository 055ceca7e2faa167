"""The fuzzer lives in test/fuzz (package `fuzz`); its cases run in worker subprocesses."""

import sys
from pathlib import Path

import pytest

TEST_DIR = Path(__file__).resolve().parents[2]
if str(TEST_DIR) not in sys.path:
    sys.path.insert(0, str(TEST_DIR))


@pytest.fixture(scope="session")
def fuzz_cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("fuzz-kernel-cache"))


@pytest.fixture(scope="session")
def fuzz_pool(fuzz_cache_dir, tmp_path_factory):
    from fuzz.worker import Pool

    with Pool(1, cache_dir=fuzz_cache_dir, log_dir=str(tmp_path_factory.mktemp("fuzz-logs"))) as pool:
        yield pool
